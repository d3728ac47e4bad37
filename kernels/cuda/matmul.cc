// matmul, matmul_accumulate and dense on the GPU through cuBLAS (cublasGemmEx and its strided
// batched form): f32 and f64 in their own precision, bf16 inputs with f32 accumulation, integers
// through a plain kernel. TF32 tensor-core math is used for f32 only when allowed
// (cuda/tf32.h): off by default, so f32 results match the CPU's to f32 rounding.
#include <cublas_v2.h>

#include <mutex>
#include <vector>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/cuda/tf32.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

namespace {

void check_cublas(cublasStatus_t status, const char* call, const char* op) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw_error<cuda::CudaError>(op, "{} failed: {}", call, cublasGetStatusString(status));
  }
}

// One handle per physical GPU, bound to its stream once; never destroyed.
cublasHandle_t handle_for(const Tensor& t, const char* op) {
  static std::mutex mu;
  static auto* handles = new std::vector<cublasHandle_t>;
  cudaStream_t stream = stream_of(t, op);
  const size_t gpu = static_cast<size_t>(cuda::physical_gpu_of(t.device()));
  std::lock_guard<std::mutex> lock(mu);
  if (handles->size() <= gpu) handles->resize(gpu + 1, nullptr);
  cublasHandle_t& h = (*handles)[gpu];
  if (h == nullptr) {
    check_cublas(cublasCreate(&h), "cublasCreate", op);
    check_cublas(cublasSetStream(h, stream), "cublasSetStream", op);
  }
  return h;
}

struct Geometry {
  int64_t m, n, k;
  Shape batch, out;
  DType out_dtype;  // the operands' dtype, or f32 for bf16 with f32_output
  std::vector<int64_t> a_offsets, b_offsets;  // per output batch, in elements
  bool uniform = false;                       // offsets are i * stride (strided batched gemm)
  int64_t a_stride = 0, b_stride = 0;
};

std::vector<int64_t> batch_offsets(const Shape& batch, const Shape& operand_batch, int64_t matrix) {
  const StridedIndex idx = broadcast(operand_batch, batch, "matmul");
  std::vector<int64_t> out(static_cast<size_t>(num_elements(batch)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = idx.offset(static_cast<int64_t>(i)) * matrix;
  return out;
}

// The uniform stride of offsets, if they are i * stride.
bool uniform_stride(const std::vector<int64_t>& offsets, int64_t* stride) {
  *stride = offsets.size() > 1 ? offsets[1] - offsets[0] : 0;
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] != static_cast<int64_t>(i) * *stride) return false;
  }
  return true;
}

Geometry geometry(const char* op, const Tensor& a, const Tensor& b, const MatmulOptions& o) {
  const MatmulDims d = matmul_dims(op, a, b, o);
  Geometry g;
  g.m = d.m;
  g.n = d.n;
  g.k = d.k;
  g.batch = d.batch;
  g.out = d.out;
  g.out_dtype = d.out_dtype;
  const Shape& a_batch = d.a_batch;
  const Shape& b_batch = d.b_batch;
  if (num_elements(g.out) > 0) {
    g.a_offsets = batch_offsets(g.batch, a_batch, g.m * g.k);
    g.b_offsets = batch_offsets(g.batch, b_batch, g.k * g.n);
    g.uniform =
        uniform_stride(g.a_offsets, &g.a_stride) && uniform_stride(g.b_offsets, &g.b_stride);
  }
  return g;
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::kF64:
      return CUDA_R_64F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// out = a x b + beta * out, row-major, through the column-major gemm of the transposes:
// out^T[n,m] = op(b)^T x op(a)^T.
void gemm(const char* op, const Geometry& g, const Tensor& a, bool ta, const Tensor& b, bool tb,
          Tensor& out, double beta) {
  if (num_elements(g.out) == 0) return;
  if (is_integer(a.dtype())) {
    const size_t esize = dtype_size(a.dtype());
    const int64_t batches = g.uniform ? 1 : num_elements(g.batch);
    for (int64_t i = 0; i < batches; ++i) {
      // Uniform batch strides go in one launch; other broadcasts launch once per batch.
      const size_t ao = g.uniform ? 0 : static_cast<size_t>(g.a_offsets[static_cast<size_t>(i)]);
      const size_t bo = g.uniform ? 0 : static_cast<size_t>(g.b_offsets[static_cast<size_t>(i)]);
      cuda_launch::int_matmul(
          code(a.dtype()), static_cast<const char*>(a.raw_data()) + ao * esize, g.a_stride, ta,
          static_cast<const char*>(b.raw_data()) + bo * esize, g.b_stride, tb,
          static_cast<char*>(out.raw_data()) + static_cast<size_t>(i * g.m * g.n) * esize,
          g.uniform ? num_elements(g.batch) : 1, g.m, g.n, g.k, beta != 0, stream_of(a, op));
    }
    return;
  }
  cublasHandle_t h = handle_for(a, op);
  const bool f64 = out.dtype() == DType::kF64;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (out.dtype() == DType::kF32 && a.dtype() == DType::kF32 && cuda_tf32_allowed()
                 ? CUBLAS_COMPUTE_32F_FAST_TF32
                 : CUBLAS_COMPUTE_32F);
  const double one64 = 1.0;
  const float one32 = 1.0f, beta32 = static_cast<float>(beta);
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : &beta32;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const int lda = static_cast<int>(std::max<int64_t>(1, ta ? g.m : g.k));
  const int ldb = static_cast<int>(std::max<int64_t>(1, tb ? g.k : g.n));
  const int ldc = std::max(1, n);
  const cudaDataType_t in_t = cuda_type(a.dtype()), out_t = cuda_type(out.dtype());
  const size_t in_size = dtype_size(a.dtype()), out_size = dtype_size(out.dtype());
  const int64_t batches = num_elements(g.batch);
  if (g.uniform) {
    check_cublas(cublasGemmStridedBatchedEx(
                     h, op_b, op_a, n, m, k, alpha, b.raw_data(), in_t, ldb, g.b_stride,
                     a.raw_data(), in_t, lda, g.a_stride, beta_p, out.raw_data(), out_t, ldc,
                     g.m * g.n, static_cast<int>(batches), compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx", op);
    return;
  }
  for (int64_t i = 0; i < batches; ++i) {
    const char* pa = static_cast<const char*>(a.raw_data()) +
                     static_cast<size_t>(g.a_offsets[static_cast<size_t>(i)]) * in_size;
    const char* pb = static_cast<const char*>(b.raw_data()) +
                     static_cast<size_t>(g.b_offsets[static_cast<size_t>(i)]) * in_size;
    char* pc = static_cast<char*>(out.raw_data()) + static_cast<size_t>(i * g.m * g.n) * out_size;
    check_cublas(cublasGemmEx(h, op_b, op_a, n, m, k, alpha, pb, in_t, ldb, pa, in_t, lda, beta_p,
                              pc, out_t, ldc, compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx", op);
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  const Geometry g = geometry("matmul", a, b, options);
  Tensor out = Tensor::empty(g.out, g.out_dtype, a.device());
  gemm("matmul", g, a, options.transpose_a, b, options.transpose_b, out, 0.0);
  return out;
}

void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                       const MatmulOptions& options) {
  const char* op = "matmul_accumulate";
  check_accumulate_dtype(out);
  const Geometry g = geometry(op, a, b, options);
  check_accumulate_output(a, b, out, options, g.out);
  gemm(op, g, a, options.transpose_a, b, options.transpose_b, out, 1.0);
}

Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
             std::optional<UnaryOp> activation, const MatmulOptions& options) {
  const Geometry g = geometry("dense", x, w, options);
  checks::dense_bias(bias, g.out, g.out_dtype);
  Tensor out = Tensor::empty(g.out, g.out_dtype, x.device());
  gemm("dense", g, x, options.transpose_a, w, options.transpose_b, out, 0.0);
  const bool fused = out.dtype() == DType::kF32 || out.dtype() == DType::kF64;
  const bool relu = activation && *activation == UnaryOp::kRelu;
  if (fused && (!activation || relu)) {
    // One pass adds the bias and applies ReLU in place.
    if (bias != nullptr || relu) {
      cuda_launch::bias_activation(code(out.dtype()), out.raw_data(),
                                   bias ? bias->raw_data() : nullptr,
                                   num_elements(g.out) / std::max<int64_t>(1, g.n), g.n,
                                   relu ? cuda_launch::unary_op::kRelu : -1, stream_of(x, "dense"));
    }
    return out;
  }
  if (bias != nullptr) out = registered_table.binary(BinaryOp::kAdd, out, *bias);
  if (activation) out = registered_table.unary(*activation, out);
  return out;
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_matmul_kernels(Table& table) {
  table.matmul = matmul;
  table.matmul_accumulate = matmul_accumulate;
  table.dense = dense;
}

}  // namespace dtensor::kernels::gpu
