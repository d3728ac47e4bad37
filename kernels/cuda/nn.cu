// Reductions and neural-network kernels: reduce over axes, argmax/argmin, the softmax family,
// sparse cross-entropy and its gradient, one_hot, layer_norm and its gradient, gather,
// scatter_add, the dense epilogue and the integer matmul. bf16 inputs arrive here converted to
// f32 by the host side (as the CPU kernels do), except in reduce and the data movement kernels.
// Row kernels run one thread per row (outer, inner) position: simple to check against the CPU
// loops, and the sizes of the seed models keep every row short.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/checked_launch.cuh"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/launch.h"

namespace dtensor::kernels::cuda_launch {
namespace {

using namespace reduce_kind;

// The accumulator of a reduction: floats accumulate in f64 (kernels.h), integers in i64 with
// wrapping, bool as bool.
template <typename T>
struct Acc {
  using type = std::conditional_t<kIsFloat<T>, double,
                                  std::conditional_t<std::is_same_v<T, bool>, bool, int64_t>>;
};

template <typename A>
__device__ A reduce_init(int kind) {
  if constexpr (std::is_same_v<A, bool>) {
    return kind == kMin;
  } else if constexpr (std::is_same_v<A, double>) {
    return kind == kProd ? 1.0 : kind == kMax ? -INFINITY : kind == kMin ? INFINITY : 0.0;
  } else {
    return kind == kProd ? 1 : kind == kMax ? INT64_MIN : kind == kMin ? INT64_MAX : 0;
  }
}

template <typename A>
__device__ A reduce_step(int kind, A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return kind == kMin ? (a && b) : (a || b);
  } else if constexpr (std::is_same_v<A, double>) {
    switch (kind) {
      case kMax:
        return max_nan(a, b);
      case kMin:
        return min_nan(a, b);
      case kProd:
        return a * b;
      default:
        return a + b;
    }
  } else {
    switch (kind) {
      case kMax:
        return a < b ? b : a;
      case kMin:
        return b < a ? b : a;
      case kProd:
        return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      default:
        return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    }
  }
}

template <typename T>
__device__ typename Acc<T>::type to_acc(T v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return to_float(v);
  } else {
    return static_cast<typename Acc<T>::type>(v);
  }
}

// One block per output: the threads stride over the reduced elements, then a shared-memory tree.
template <typename T>
__global__ void reduce_kernel(int kind, const T* x, StridedIndex kept, StridedIndex reduced, T* out,
                              int64_t per_output, int64_t typed_limit) {
  using A = typename Acc<T>::type;
  __shared__ A part[kThreads];
  for (int64_t o = blockIdx.x; o < typed_limit; o += gridDim.x) {
    const int64_t base = kept.offset(o);
    A acc = reduce_init<A>(kind);
    for (int64_t r = threadIdx.x; r < per_output; r += blockDim.x) {
      acc = reduce_step(kind, acc, to_acc(x[base + reduced.offset(r)]));
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s)
        part[threadIdx.x] = reduce_step(kind, part[threadIdx.x], part[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      A v = part[0];
      if (kind == kMean) {
        if constexpr (std::is_same_v<A, double>) {
          v = per_output == 0 ? NAN : v / static_cast<double>(per_output);
        } else if constexpr (std::is_same_v<A, int64_t>) {
          v = per_output == 0 ? 0 : v / per_output;
        }
      }
      if constexpr (std::is_same_v<T, Bf16>) {
        out[o] = to_bf16(static_cast<float>(v));
      } else {
        out[o] = static_cast<T>(v);
      }
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void arg_kernel(bool is_max, const T* x, int64_t outer, int64_t n, int64_t inner,
                           int64_t* out) {
  DTENSOR_FOR_EACH(p, outer * inner) {
    const int64_t o = p / inner, i = p % inner;
    const T* row = x + o * n * inner + i;
    int64_t best = 0;
    Compute<T> bv = load(row, 0);
    if (bv == bv) {
      for (int64_t r = 1; r < n; ++r) {
        const Compute<T> v = load(row, r * inner);
        if (v != v) {  // the first NaN wins
          best = r;
          break;
        }
        if (is_max ? v > bv : v < bv) {
          bv = v;
          best = r;
        }
      }
    }
    out[p] = best;
  }
}

template <typename T>
__device__ T shift_for_max(T m) {
  if (isfinite(m)) return m;
  if (m > T(0)) return std::is_same_v<T, float> ? T(3.402823466e38f) : T(1.7976931348623157e308);
  return T(0);
}

// Max, shift and f64 sum of exp(x - shift) along one row of n elements with stride `inner`.
template <typename T>
__device__ void row_stats(const T* row, int64_t n, int64_t inner, T& shift, double& sum) {
  T m = -INFINITY;
  for (int64_t r = 0; r < n; ++r) m = max_nan(m, row[r * inner]);
  shift = shift_for_max(m);
  sum = 0;
  for (int64_t r = 0; r < n; ++r) sum += static_cast<double>(exp(row[r * inner] - shift));
}

template <typename T>
__global__ void softmax_kernel(int mode, const T* x, int64_t outer, int64_t n, int64_t inner,
                               T* out) {
  DTENSOR_FOR_EACH(p, outer * inner) {
    const int64_t o = p / inner, i = p % inner;
    const T* row = x + o * n * inner + i;
    T shift;
    double sum;
    row_stats(row, n, inner, shift, sum);
    if (mode == softmax_mode::kLogSumExp) {
      out[p] = shift + static_cast<T>(log(sum));
      continue;
    }
    T* y = out + o * n * inner + i;
    if (mode == softmax_mode::kSoftmax) {
      const T f = static_cast<T>(1.0 / sum);
      for (int64_t r = 0; r < n; ++r) y[r * inner] = exp(row[r * inner] - shift) * f;
    } else {
      const T f = static_cast<T>(log(sum));
      for (int64_t r = 0; r < n; ++r) y[r * inner] = (row[r * inner] - shift) - f;
    }
  }
}

template <typename T>
__global__ void shift_kernel(const T* m, T* out, int64_t n) {
  DTENSOR_FOR_EACH(i, n) { out[i] = shift_for_max(m[i]); }
}

__device__ int64_t label_of(int label_dtype, const void* labels, int64_t i) {
  return label_dtype == kI32 ? static_cast<const int32_t*>(labels)[i]
                             : static_cast<const int64_t*>(labels)[i];
}

template <typename T>
__global__ void xent_kernel(const T* logits, int label_dtype, const void* labels, int64_t rows,
                            int64_t classes, T* loss, int64_t* bad_row) {
  DTENSOR_FOR_EACH(i, rows) {
    const int64_t label = label_of(label_dtype, labels, i);
    if (label < 0 || label >= classes) {
      atomicMin(reinterpret_cast<unsigned long long*>(bad_row), static_cast<unsigned long long>(i));
      loss[i] = NAN;
      continue;
    }
    const T* row = logits + i * classes;
    T shift;
    double sum;
    row_stats(row, classes, 1, shift, sum);
    const double picked = static_cast<double>(row[label]) - static_cast<double>(shift);
    loss[i] = static_cast<T>(log(sum) - picked);
  }
}

template <typename T>
__global__ void xent_grad_kernel(const T* logits, int label_dtype, const void* labels,
                                 const T* grad, int64_t rows, int64_t classes, T* dx) {
  DTENSOR_FOR_EACH(i, rows) {
    const T* row = logits + i * classes;
    T shift;
    double sum;
    row_stats(row, classes, 1, shift, sum);
    const T factor = static_cast<T>(static_cast<double>(grad[i]) / sum);
    T* out = dx + i * classes;
    for (int64_t c = 0; c < classes; ++c) out[c] = exp(row[c] - shift) * factor;
    const int64_t label = label_of(label_dtype, labels, i);
    if (label >= 0 && label < classes) out[label] -= grad[i];
  }
}

template <typename T>
__global__ void one_hot_kernel(int index_dtype, const void* indices, int64_t n, int64_t depth, T on,
                               T off, T* out) {
  DTENSOR_FOR_EACH(p, n * depth) {
    const int64_t i = p / depth, c = p % depth;
    out[p] = label_of(index_dtype, indices, i) == c ? on : off;
  }
}

template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* g, const T* b, double eps, int64_t rows,
                                  int64_t d, T* y, T* mean_out, T* rstd_out) {
  DTENSOR_FOR_EACH(i, rows) {
    const T* row = x + i * d;
    double s = 0;
    for (int64_t j = 0; j < d; ++j) s += static_cast<double>(row[j]);
    const double mean = d > 0 ? s / static_cast<double>(d) : 0.0;
    double sq = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double c = static_cast<double>(row[j]) - mean;
      sq += c * c;
    }
    const double var = d > 0 ? sq / static_cast<double>(d) : 0.0;
    const double rstd = 1.0 / sqrt(var + eps);
    mean_out[i] = static_cast<T>(mean);
    rstd_out[i] = static_cast<T>(rstd);
    const T m = static_cast<T>(mean), r = static_cast<T>(rstd);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = (row[j] - m) * r * g[j] + b[j];
  }
}

template <typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const T* g, const T* mean,
                                     const T* rstd, int64_t rows, int64_t d, T* dx) {
  DTENSOR_FOR_EACH(i, rows) {
    const T m = mean[i], s = rstd[i];
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < d; ++j) {
      const T xh = (x[i * d + j] - m) * s;
      const T gj = dy[i * d + j] * g[j];
      mg += static_cast<double>(gj);
      mgx += static_cast<double>(gj * xh);
    }
    if (d > 0) {
      mg /= static_cast<double>(d);
      mgx /= static_cast<double>(d);
    }
    const T a = static_cast<T>(mg), bb = static_cast<T>(mgx);
    for (int64_t j = 0; j < d; ++j) {
      const T xh = (x[i * d + j] - m) * s;
      const T gj = dy[i * d + j] * g[j];
      dx[i * d + j] = s * (gj - a - xh * bb);
    }
  }
}

template <typename T>
__global__ void layer_norm_dparams_kernel(const T* dy, const T* x, const T* mean, const T* rstd,
                                          int64_t rows, int64_t d, T* dgamma, T* dbeta) {
  DTENSOR_FOR_EACH(j, d) {
    double dg = 0, db = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const T xh = (x[i * d + j] - mean[i]) * rstd[i];
      dg += static_cast<double>(dy[i * d + j]) * static_cast<double>(xh);
      db += static_cast<double>(dy[i * d + j]);
    }
    dgamma[j] = static_cast<T>(dg);
    dbeta[j] = static_cast<T>(db);
  }
}

template <typename E>
__global__ void gather_kernel(const E* params, int64_t outer, int64_t axis_n, int64_t inner,
                              int index_dtype, const void* indices, int64_t count, E* out,
                              int64_t* bad, const int64_t* row_offset, int64_t limit) {
  const int64_t first = row_offset == nullptr ? 0 : *row_offset;
  DTENSOR_FOR_EACH(p, outer * count * inner) {
    const int64_t i = p % inner, j = (p / inner) % count, o = p / (inner * count);
    const int64_t k = label_of(index_dtype, indices, j);
    if (k < 0 || k >= limit) {
      atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(j));
      out[p] = E{};
      continue;
    }
    const int64_t row = k - first;  // another shard's row (row_offset given) reads zero
    out[p] = row >= 0 && row < axis_n ? params[(o * axis_n + row) * inner + i] : E{};
  }
}

// Deterministic: each output element sums its updates in index order, as the CPU does.
template <typename T>
__global__ void scatter_add_kernel(const T* updates, int64_t outer, int64_t axis_n, int64_t inner,
                                   int index_dtype, const void* indices, int64_t count, T* out,
                                   int64_t* bad, const int64_t* row_offset, int64_t per_chunk) {
  // With row_offset: out holds rows [*row_offset, *row_offset + axis_n); other ids are skipped.
  const int64_t first = row_offset == nullptr ? 0 : *row_offset;
  DTENSOR_FOR_EACH(p, outer * axis_n * inner) {
    const int64_t i = p % inner, k = first + (p / inner) % axis_n, o = p / (inner * axis_n);
    Compute<T> acc = 0;
    double folded = 0;  // per_chunk > 0: the chunk sums, in order
    for (int64_t j = 0; j < count; ++j) {
      if (per_chunk > 0 && j > 0 && j % per_chunk == 0) {
        folded += static_cast<double>(acc);
        acc = 0;
      }
      const int64_t idx = label_of(index_dtype, indices, j);
      if (row_offset == nullptr && (idx < 0 || idx >= axis_n)) {
        if (p == 0)
          atomicMin(reinterpret_cast<unsigned long long*>(bad), static_cast<unsigned long long>(j));
        continue;
      }
      if (idx == k) acc = wrap_add(acc, load(updates, (o * count + j) * inner + i));
    }
    if (per_chunk > 0) acc = static_cast<Compute<T>>(folded + static_cast<double>(acc));
    store(out, p, acc);
  }
}

template <typename T>
__global__ void bias_act_kernel(T* out, const T* bias, int64_t rows, int64_t cols, int act) {
  DTENSOR_FOR_EACH(p, rows * cols) {
    T v = out[p];
    if (bias != nullptr) v += bias[p % cols];
    if (act == unary_op::kRelu) v = max_nan(v, T(0));
    out[p] = v;
  }
}

template <typename T>
__global__ void int_matmul_kernel(const T* a, int64_t sa, bool ta, const T* b, int64_t sb, bool tb,
                                  T* out, int64_t batch, int64_t m, int64_t n, int64_t k,
                                  bool accumulate) {
  using U = std::make_unsigned_t<T>;
  DTENSOR_FOR_EACH(p, batch * m * n) {
    const int64_t j = p % n, i = (p / n) % m, bt = p / (m * n);
    const T* pa = a + bt * sa;
    const T* pb = b + bt * sb;
    U acc = accumulate ? static_cast<U>(out[p]) : U(0);
    for (int64_t q = 0; q < k; ++q) {
      const T x = ta ? pa[q * m + i] : pa[i * k + q];
      const T y = tb ? pb[j * k + q] : pb[q * n + j];
      acc += static_cast<U>(x) * static_cast<U>(y);
    }
    out[p] = static_cast<T>(acc);
  }
}

}  // namespace

void reduce(int kind, int dtype, const void* x, const StridedIndex& kept,
            const StridedIndex& reduced, void* out, int64_t outputs, int64_t per_output,
            cudaStream_t stream) {
  if (outputs == 0) return;
  const unsigned grid = static_cast<unsigned>(outputs < 65535 * 16 ? outputs : 65535 * 16);
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("reduce_kernel", reduce_kernel<T>, grid, kThreads, stream, kind,
                   static_cast<const T*>(x), kept, reduced, static_cast<T*>(out), per_output,
                   outputs);
  });
}

void arg_reduce(bool is_max, int dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                void* out, cudaStream_t stream) {
  if (outer * inner == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      checked_launch("arg_kernel", arg_kernel<T>, blocks_for(outer * inner), kThreads, stream,
                     is_max, static_cast<const T*>(x), outer, n, inner, static_cast<int64_t*>(out));
    }
  });
}

void softmax(int mode, int dtype, const void* x, int64_t outer, int64_t n, int64_t inner, void* out,
             cudaStream_t stream) {
  if (outer * inner == 0) return;
  if (dtype == kF64) {
    checked_launch("softmax_kernel", softmax_kernel<double>, blocks_for(outer * inner), kThreads,
                   stream, mode, static_cast<const double*>(x), outer, n, inner,
                   static_cast<double*>(out));
  } else {
    checked_launch("softmax_kernel", softmax_kernel<float>, blocks_for(outer * inner), kThreads,
                   stream, mode, static_cast<const float*>(x), outer, n, inner,
                   static_cast<float*>(out));
  }
}

void softmax_shift(int dtype, const void* max, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == kF64) {
    checked_launch("shift_kernel", shift_kernel<double>, blocks_for(n), kThreads, stream,
                   static_cast<const double*>(max), static_cast<double*>(out), n);
  } else {
    checked_launch("shift_kernel", shift_kernel<float>, blocks_for(n), kThreads, stream,
                   static_cast<const float*>(max), static_cast<float*>(out), n);
  }
}

void sparse_xent(int dtype, const void* logits, int label_dtype, const void* labels, int64_t rows,
                 int64_t classes, void* loss, int64_t* bad_row, cudaStream_t stream) {
  if (rows == 0) return;
  if (dtype == kF64) {
    checked_launch("xent_kernel", xent_kernel<double>, blocks_for(rows), kThreads, stream,
                   static_cast<const double*>(logits), label_dtype, labels, rows, classes,
                   static_cast<double*>(loss), bad_row);
  } else {
    checked_launch("xent_kernel", xent_kernel<float>, blocks_for(rows), kThreads, stream,
                   static_cast<const float*>(logits), label_dtype, labels, rows, classes,
                   static_cast<float*>(loss), bad_row);
  }
}

void sparse_xent_grad(int dtype, const void* logits, int label_dtype, const void* labels,
                      const void* grad, int64_t rows, int64_t classes, void* dlogits,
                      cudaStream_t stream) {
  if (rows == 0) return;
  if (dtype == kF64) {
    checked_launch("xent_grad_kernel", xent_grad_kernel<double>, blocks_for(rows), kThreads, stream,
                   static_cast<const double*>(logits), label_dtype, labels,
                   static_cast<const double*>(grad), rows, classes, static_cast<double*>(dlogits));
  } else {
    checked_launch("xent_grad_kernel", xent_grad_kernel<float>, blocks_for(rows), kThreads, stream,
                   static_cast<const float*>(logits), label_dtype, labels,
                   static_cast<const float*>(grad), rows, classes, static_cast<float*>(dlogits));
  }
}

void one_hot(int index_dtype, const void* indices, int64_t n, int64_t depth, int dtype, double on,
             double off, void* out, cudaStream_t stream) {
  if (n * depth == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    T on_v, off_v;
    if constexpr (std::is_same_v<T, Bf16>) {
      on_v = to_bf16(static_cast<float>(on));
      off_v = to_bf16(static_cast<float>(off));
    } else if constexpr (std::is_same_v<T, bool>) {
      on_v = on != 0;
      off_v = off != 0;
    } else {
      on_v = static_cast<T>(on);
      off_v = static_cast<T>(off);
    }
    checked_launch("one_hot_kernel", one_hot_kernel<T>, blocks_for(n * depth), kThreads, stream,
                   index_dtype, indices, n, depth, on_v, off_v, static_cast<T*>(out));
  });
}

void layer_norm(int dtype, const void* x, const void* gamma, const void* beta, double eps,
                int64_t rows, int64_t d, void* y, int stat_dtype, void* mean, void* rstd,
                cudaStream_t stream) {
  if (rows == 0) return;
  visit_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, Bf16>) {
      checked_launch("layer_norm_kernel", layer_norm_kernel<T>, blocks_for(rows), kThreads, stream,
                     static_cast<const T*>(x), static_cast<const T*>(gamma),
                     static_cast<const T*>(beta), eps, rows, d, static_cast<T*>(y),
                     static_cast<T*>(mean), static_cast<T*>(rstd));
    }
  });
}

void layer_norm_grad(int dtype, const void* dy, const void* x, const void* gamma, int stat_dtype,
                     const void* mean, const void* rstd, int64_t rows, int64_t d, void* dx,
                     void* dgamma, void* dbeta, cudaStream_t stream) {
  visit_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, Bf16>) {
      if (rows > 0) {
        checked_launch("layer_norm_dx_kernel", layer_norm_dx_kernel<T>, blocks_for(rows), kThreads,
                       stream, static_cast<const T*>(dy), static_cast<const T*>(x),
                       static_cast<const T*>(gamma), static_cast<const T*>(mean),
                       static_cast<const T*>(rstd), rows, d, static_cast<T*>(dx));
      }
      if (d > 0) {
        checked_launch("layer_norm_dparams_kernel", layer_norm_dparams_kernel<T>, blocks_for(d),
                       kThreads, stream, static_cast<const T*>(dy), static_cast<const T*>(x),
                       static_cast<const T*>(mean), static_cast<const T*>(rstd), rows, d,
                       static_cast<T*>(dgamma), static_cast<T*>(dbeta));
      }
    }
  });
}

void gather(int elem_size, const void* params, int64_t outer, int64_t axis_n, int64_t inner,
            int index_dtype, const void* indices, int64_t count, void* out, int64_t* bad_index,
            cudaStream_t stream, const int64_t* row_offset, int64_t limit) {
  const int64_t n = outer * count * inner;
  if (n == 0) return;
  auto launch = [&](auto zero) {
    using E = decltype(zero);
    checked_launch("gather_kernel", gather_kernel<E>, blocks_for(n), kThreads, stream,
                   static_cast<const E*>(params), outer, axis_n, inner, index_dtype, indices, count,
                   static_cast<E*>(out), bad_index, row_offset,
                   row_offset == nullptr ? axis_n : limit);
  };
  switch (elem_size) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    default:
      return launch(uint64_t{});
  }
}

void scatter_add(int dtype, const void* updates, int64_t outer, int64_t axis_n, int64_t inner,
                 int index_dtype, const void* indices, int64_t count, void* out, int64_t* bad_index,
                 cudaStream_t stream, const int64_t* row_offset, int64_t per_chunk) {
  const int64_t n = outer * axis_n * inner;
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      checked_launch("scatter_add_kernel", scatter_add_kernel<T>, blocks_for(n), kThreads, stream,
                     static_cast<const T*>(updates), outer, axis_n, inner, index_dtype, indices,
                     count, static_cast<T*>(out), bad_index, row_offset, per_chunk);
    }
  });
}

void bias_activation(int dtype, void* out, const void* bias, int64_t rows, int64_t cols,
                     int activation, cudaStream_t stream) {
  if (rows * cols == 0) return;
  if (dtype == kF64) {
    checked_launch("bias_act_kernel", bias_act_kernel<double>, blocks_for(rows * cols), kThreads,
                   stream, static_cast<double*>(out), static_cast<const double*>(bias), rows, cols,
                   activation);
  } else {
    checked_launch("bias_act_kernel", bias_act_kernel<float>, blocks_for(rows * cols), kThreads,
                   stream, static_cast<float*>(out), static_cast<const float*>(bias), rows, cols,
                   activation);
  }
}

void int_matmul(int dtype, const void* a, int64_t a_batch_stride, bool ta, const void* b,
                int64_t b_batch_stride, bool tb, void* out, int64_t batch, int64_t m, int64_t n,
                int64_t k, bool accumulate, cudaStream_t stream) {
  const int64_t total = batch * m * n;
  if (total == 0) return;
  if (dtype == kI32) {
    checked_launch("int_matmul_kernel", int_matmul_kernel<int32_t>, blocks_for(total), kThreads,
                   stream, static_cast<const int32_t*>(a), a_batch_stride, ta,
                   static_cast<const int32_t*>(b), b_batch_stride, tb, static_cast<int32_t*>(out),
                   batch, m, n, k, accumulate);
  } else {
    checked_launch("int_matmul_kernel", int_matmul_kernel<int64_t>, blocks_for(total), kThreads,
                   stream, static_cast<const int64_t*>(a), a_batch_stride, ta,
                   static_cast<const int64_t*>(b), b_batch_stride, tb, static_cast<int64_t*>(out),
                   batch, m, n, k, accumulate);
  }
}

}  // namespace dtensor::kernels::cuda_launch
