// Matrix multiplication: oneDNN for f32 and bf16 (with the dense layer's bias and ReLU fused),
// OpenBLAS gemm for f64 and where oneDNN has no kernel, a blocked loop for integers.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_blocks.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/matmul_onednn.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

// Shapes of one (possibly batched, broadcast) matmul, validated.
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  Shape batch;                         // broadcast batch shape
  std::vector<int64_t> a_batch_index;  // per output batch: the matrix of a (and of b) it uses;
  std::vector<int64_t> b_batch_index;  // empty when the output is empty
  Shape out;
  DType out_dtype = DType::kF32;  // the operands' dtype, or f32 for bf16 with f32_output

  int64_t batch_count() const { return static_cast<int64_t>(a_batch_index.size()); }
};

// Matrix index within an operand for every output batch, broadcasting the operand's batch dims.
std::vector<int64_t> batch_indices(const Shape& batch, const Shape& operand_batch) {
  const int64_t count = num_elements(batch);
  std::vector<int64_t> result(static_cast<size_t>(count), 0);
  const size_t rank = batch.size();
  const size_t offset = rank - operand_batch.size();
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t j = operand_batch.size(); j-- > 0;) {
    strides[offset + j] = operand_batch[j] == 1 ? 0 : stride;
    stride *= operand_batch[j];
  }
  std::vector<int64_t> index(rank, 0);
  int64_t current = 0;
  for (int64_t i = 0; i < count; ++i) {
    result[static_cast<size_t>(i)] = current;
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < batch[d]) {
        current += strides[d];
        break;
      }
      current -= strides[d] * (batch[d] - 1);
      index[d] = 0;
    }
  }
  return result;
}

MatmulShape matmul_shape(const char* op, const Tensor& a, const Tensor& b,
                         const MatmulOptions& options) {
  if (options.blas_threads < 0) {
    throw_error<InvalidArgumentError>(op, "blas_threads must be >= 0, got {}",
                                      options.blas_threads);
  }
  const MatmulDims d = matmul_dims(op, a, b, options);
  MatmulShape s;
  s.m = d.m;
  s.n = d.n;
  s.k = d.k;
  s.batch = d.batch;
  const bool ta = options.transpose_a, tb = options.transpose_b;
  constexpr int64_t kMaxBlas = INT_MAX;
  if (s.m > kMaxBlas || s.n > kMaxBlas || s.k > kMaxBlas) {
    throw_error<InvalidArgumentError>(op, "matrix dims exceed the BLAS int range: {} x {}",
                                      matmul_operand(a, ta), matmul_operand(b, tb));
  }
  s.out = d.out;
  s.out_dtype = d.out_dtype;
  // An empty result needs no batches (and its batch dims may be huge when m or n is 0).
  if (num_elements(s.out) > 0) {
    s.a_batch_index = batch_indices(s.batch, d.a_batch);
    s.b_batch_index = batch_indices(s.batch, d.b_batch);
  }
  return s;
}

int blas_int(int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); }

std::mutex& blas_mutex() {
  static std::mutex mu;
  return mu;
}
// Written under blas_mutex(); the kernels read it without the lock.
std::atomic<int> last_blas_threads{0};

// OpenBLAS runs on one thread per call; the product's blocks go to the pool (gemm_blocks.h says
// why). Reset when someone else (a benchmark calling OpenBLAS directly) changed the setting.
void use_one_openblas_thread() {
  if (openblas_get_num_threads() == 1) return;
  std::lock_guard<std::mutex> lock(blas_mutex());
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a, blas_int(lda),
              b, blas_int(ldb), beta, c, blas_int(ldc));
}

void gemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, a, blas_int(lda),
              b, blas_int(ldb), beta, c, blas_int(ldc));
}

// c (+)= a x b for dense row-major matrices on up to `threads` threads: single-threaded OpenBLAS
// calls on blocks of rows (or columns) of c.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T beta, T* c,
          int threads) {
  use_one_openblas_thread();
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  run_gemm_blocks(m, n, k, threads, [&](const GemmBlock& part) {
    const int64_t len = part.end - part.begin;
    if (part.by_rows) {
      gemm_block(ta, tb, len, n, k, a + part.begin * (ta ? 1 : k), lda, b, ldb, beta,
                 c + part.begin * n, n);
    } else {
      gemm_block(ta, tb, m, len, k, a, lda, b + part.begin * (tb ? k : 1), ldb, beta,
                 c + part.begin, n);
    }
  });
}

// The threads a product gets: the option, else the last set_blas_threads value, else every core.
int product_threads(const MatmulOptions& options) {
  if (options.blas_threads > 0) return options.blas_threads;
  const int set = last_blas_threads.load(std::memory_order_relaxed);
  if (set > 0) return set;
  static const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return cores;
}

// c (+)= a x b over all batches with gemm; beta 0 overwrites, 1 accumulates.
template <typename T>
void float_matmul(const MatmulShape& s, const Tensor& a, const Tensor& b, bool ta, bool tb, T beta,
                  Tensor& out, int threads) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* pc = out.data<T>();
  if (out.num_elements() == 0) return;
  if (s.k == 0) {
    if (beta == T{0}) std::fill(pc, pc + out.num_elements(), T{0});
    return;
  }
  const int64_t batches = s.batch_count();
  // b shared by every batch and a untransposed: the batch folds into m, one large gemm.
  const bool b_shared =
      std::all_of(s.b_batch_index.begin(), s.b_batch_index.end(), [](int64_t i) { return i == 0; });
  const bool a_stacked = [&] {
    for (int64_t i = 0; i < batches; ++i) {
      if (s.a_batch_index[static_cast<size_t>(i)] != i) return false;
    }
    return true;
  }();
  if (batches > 1 && b_shared && a_stacked && !ta && batches * s.m <= INT_MAX) {
    gemm(false, tb, batches * s.m, s.n, s.k, pa, pb, beta, pc, threads);
    return;
  }
  for (int64_t i = 0; i < batches; ++i) {
    const T* ai = pa + s.a_batch_index[static_cast<size_t>(i)] * s.m * s.k;
    const T* bi = pb + s.b_batch_index[static_cast<size_t>(i)] * s.k * s.n;
    gemm(ta, tb, s.m, s.n, s.k, ai, bi, beta, pc + i * s.m * s.n, threads);
  }
}

// Integer c = a x b for untransposed row-major operands, wrapping; blocked over k and n so that a
// tile of b stays in cache while the rows of a stream past it.
template <typename T>
void integer_gemm(int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c) {
  constexpr int64_t kBlockK = 128, kBlockN = 512;
  std::fill(c, c + m * n, T{0});
  for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
    const int64_t p1 = std::min(k, p0 + kBlockK);
    for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
      const int64_t len = std::min(n, j0 + kBlockN) - j0;
      for (int64_t i = 0; i < m; ++i) {
        T* __restrict crow = c + i * n + j0;
        for (int64_t p = p0; p < p1; ++p) {
          const T aip = a[i * k + p];
          const T* __restrict brow = b + p * n + j0;
          for (int64_t j = 0; j < len; ++j) {
            crow[j] = internal::wrap_add(crow[j], internal::wrap_mul(aip, brow[j]));
          }
        }
      }
    }
  }
}

// Swaps the last two dims.
Tensor transpose_last_two(const Tensor& x) {
  std::vector<int64_t> perm(static_cast<size_t>(x.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return transpose(x, perm);
}

template <typename T>
void integer_matmul(const MatmulShape& s, const Tensor& a, const Tensor& b, bool ta, bool tb,
                    Tensor& out) {
  const Tensor a2 = ta ? transpose_last_two(a) : a;
  const Tensor b2 = tb ? transpose_last_two(b) : b;
  const T* pa = a2.data<T>();
  const T* pb = b2.data<T>();
  T* pc = out.data<T>();
  for (int64_t i = 0; i < s.batch_count(); ++i) {
    integer_gemm(s.m, s.n, s.k, pa + s.a_batch_index[static_cast<size_t>(i)] * s.m * s.k,
                 pb + s.b_batch_index[static_cast<size_t>(i)] * s.k * s.n, pc + i * s.m * s.n);
  }
}

// Which backend runs an f32/bf16 product, from bench/matmul (oneDNN vs OpenBLAS GFLOP/s, both
// called directly, alternating in one run; 2-core AVX-512 host, 2026-11-24, while others built,
// so to be remeasured on a quiet machine). oneDNN won every seed-step shape but one, 1 thread:
//   [16,784]x[784,700] 112 vs 78, [16,700]x[784,700]^T 88 vs 67, [784,16]^Tx[16,700] 101 vs 83,
//   [128,784]x[784,700] 105 vs 87, [128,700]x[784,700]^T 101 vs 89, [784,128]^Tx[128,700] 104
//   vs 96, [128,500]x[500,10] 72 vs 72, [128,10]x[500,10]^T 90 vs 70;
// 2 threads (oneDNN's blocks on the pool) by 1.3x to 3.8x on the large ones, 2048^3 47 vs 45.
// The exception is a transposed a with a narrow output, the last layer's weight gradient
// [500,128]^T x [128,10]: 53 vs 88 GFLOP/s (at k = 16 they tie). So: OpenBLAS for aᵀb with
// n < 32, oneDNN for everything else.
bool onednn_wins(const MatmulShape& s, const MatmulOptions& options) {
  return !(options.transpose_a && s.n < 32);
}

// Whether an f32/bf16 product goes to oneDNN: checked before any output is allocated.
bool use_onednn(const MatmulShape& s, const MatmulOptions& options) {
  // DTENSOR_ONEDNN=0 in the environment keeps every matmul on OpenBLAS (for A/B measurements).
  static const bool enabled = [] {
    const char* v = std::getenv("DTENSOR_ONEDNN");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled && s.m > 0 && s.n > 0 && s.k > 0 && s.batch_count() > 0 && onednn_wins(s, options);
}

// c (+)= epilogue(a x b) over all batches through oneDNN (use_onednn said so), for f32 or bf16
// operands and an f32 `out`; false, with nothing written, when oneDNN has no optimised kernel for
// the case (every batch uses the same primitive, so the first call decides).
bool onednn_matmul(const MatmulShape& s, const Tensor& a, const Tensor& b,
                   const MatmulOptions& options, const onednn::Epilogue& epilogue, Tensor& out) {
  float* pc = out.data<float>();
  const int threads = product_threads(options);
  const auto* pa = static_cast<const char*>(a.raw_data());
  const auto* pb = static_cast<const char*>(b.raw_data());
  const int64_t esize = static_cast<int64_t>(dtype_size(a.dtype()));
  onednn::GemmShape g{s.m, s.n, s.k, options.transpose_a, options.transpose_b, a.dtype()};
  const int64_t batches = s.batch_count();
  // b shared by every batch and a untransposed: the batch folds into m, one large gemm.
  bool b_shared = true, a_stacked = true;
  for (int64_t i = 0; i < batches; ++i) {
    b_shared = b_shared && s.b_batch_index[static_cast<size_t>(i)] == 0;
    a_stacked = a_stacked && s.a_batch_index[static_cast<size_t>(i)] == i;
  }
  if (batches > 1 && b_shared && a_stacked && !g.transpose_a) {
    g.m *= batches;
    return onednn::gemm(g, epilogue, pa, pb, pc, threads);
  }
  for (int64_t i = 0; i < batches; ++i) {
    const char* ai = pa + s.a_batch_index[static_cast<size_t>(i)] * s.m * s.k * esize;
    const char* bi = pb + s.b_batch_index[static_cast<size_t>(i)] * s.k * s.n * esize;
    if (!onednn::gemm(g, epilogue, ai, bi, pc + i * s.m * s.n, threads)) return false;
  }
  return true;
}

// The f32 accumulator of an f32 or bf16 product as the caller asked for it: rounded to bf16 for
// bf16 operands, unless f32_output.
Tensor to_output_dtype(const MatmulShape& s, const Tensor& accumulator) {
  return s.out_dtype == DType::kBF16 ? internal::f32_to_bf16(accumulator) : accumulator;
}

}  // namespace

void set_blas_threads(int n) {
  if (n < 1) {
    throw_error<InvalidArgumentError>("set_blas_threads", "thread count must be >= 1, got {}", n);
  }
  last_blas_threads.store(n, std::memory_order_relaxed);
}

Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  const MatmulShape s = matmul_shape("matmul", a, b, options);
  if ((a.dtype() == DType::kF32 || a.dtype() == DType::kBF16) && use_onednn(s, options)) {
    Tensor out = Tensor::empty(s.out, DType::kF32, a.device());
    if (onednn_matmul(s, a, b, options, {}, out)) return to_output_dtype(s, out);
  }
  const int threads = product_threads(options);
  const bool ta = options.transpose_a, tb = options.transpose_b;
  if (a.dtype() == DType::kBF16) {
    Tensor out = Tensor::empty(s.out, DType::kF32, a.device());
    float_matmul<float>(s, internal::bf16_to_f32(a), internal::bf16_to_f32(b), ta, tb, 0.0f, out,
                        threads);
    return to_output_dtype(s, out);
  }
  Tensor out = Tensor::empty(s.out, a.dtype(), a.device());
  internal::visit_numeric(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      float_matmul<T>(s, a, b, ta, tb, T{0}, out, threads);
    } else {
      integer_matmul<T>(s, a, b, ta, tb, out);
    }
  });
  return out;
}

void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                       const MatmulOptions& options) {
  const char* op = "matmul_accumulate";
  check_accumulate_dtype(out);
  const MatmulShape s = matmul_shape(op, a, b, options);
  check_accumulate_output(a, b, out, options, s.out);
  const bool mixed = a.dtype() == DType::kBF16 && out.dtype() == DType::kF32;
  if (out.dtype() == DType::kF32 && use_onednn(s, options)) {
    onednn::Epilogue accumulate;
    accumulate.accumulate = true;
    if (onednn_matmul(s, a, b, options, accumulate, out)) return;
  }
  const int threads = product_threads(options);
  const bool ta = options.transpose_a, tb = options.transpose_b;
  if (mixed) {
    float_matmul<float>(s, internal::bf16_to_f32(a), internal::bf16_to_f32(b), ta, tb, 1.0f, out,
                        threads);
    return;
  }
  internal::visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    float_matmul<T>(s, a, b, ta, tb, T{1}, out, threads);
  });
}

Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
             std::optional<UnaryOp> activation, const MatmulOptions& options) {
  const MatmulShape s = matmul_shape("dense", x, w, options);
  checks::dense_bias(bias, s.out, s.out_dtype);
  if (activation && !internal::unary_supports(*activation, x.dtype())) {
    throw_error<DTypeError>("dense", "activation {} does not support {}: {} x {}",
                            unary_op_name(*activation), dtype_name(x.dtype()),
                            matmul_operand(x, options.transpose_a),
                            matmul_operand(w, options.transpose_b));
  }
  if ((x.dtype() == DType::kF32 || x.dtype() == DType::kBF16) && use_onednn(s, options)) {
    onednn::Epilogue epilogue;
    epilogue.bias = bias != nullptr ? bias->raw_data() : nullptr;
    epilogue.bias_dtype = s.out_dtype;
    epilogue.relu = activation == UnaryOp::kRelu;
    Tensor out = Tensor::empty(s.out, DType::kF32, x.device());
    if (onednn_matmul(s, x, w, options, epilogue, out)) {
      if (activation && !epilogue.relu) internal::unary_in_place(*activation, out);
      return to_output_dtype(s, out);
    }
  }
  if (x.dtype() == DType::kBF16) {
    // Widened to f32 (exact), multiplied by OpenBLAS, rounded back unless f32_output.
    const Tensor fb = bias && bias->dtype() == DType::kBF16 ? internal::bf16_to_f32(*bias)
                                                            : (bias ? *bias : Tensor());
    MatmulOptions f32_options = options;
    f32_options.f32_output = false;
    return to_output_dtype(s, dense(internal::bf16_to_f32(x), internal::bf16_to_f32(w),
                                    bias ? &fb : nullptr, activation, f32_options));
  }
  const int threads = product_threads(options);
  const bool ta = options.transpose_a, tb = options.transpose_b;
  Tensor out = Tensor::empty(s.out, x.dtype(), x.device());
  const int64_t rows = num_elements(s.out) / std::max<int64_t>(s.n, 1);
  internal::visit_numeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* po = out.data<T>();
    if constexpr (std::is_floating_point_v<T>) {
      // Start from the bias rows and let the gemm add x @ w onto them (beta = 1).
      if (bias != nullptr) {
        const T* pb = bias->data<T>();
        for (int64_t r = 0; r < rows; ++r) std::copy(pb, pb + s.n, po + r * s.n);
      }
      float_matmul<T>(s, x, w, ta, tb, bias != nullptr ? T{1} : T{0}, out, threads);
    } else {
      integer_matmul<T>(s, x, w, ta, tb, out);
      if (bias != nullptr) {
        const T* pb = bias->data<T>();
        for (int64_t r = 0; r < rows; ++r) {
          T* __restrict row = po + r * s.n;
          for (int64_t j = 0; j < s.n; ++j) row[j] = internal::wrap_add(row[j], pb[j]);
        }
      }
    }
  });
  if (activation) internal::unary_in_place(*activation, out);
  return out;
}

}  // namespace dtensor::kernels::cpu
