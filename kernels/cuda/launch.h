// The CUDA launchers behind the GPU kernel front: plain functions over raw device pointers, element
// counts and StridedIndex views, each enqueueing one or a few kernels on `stream` and returning at
// once. The .cc files (compiled by the host compiler) check arguments, shape outputs and allocate;
// the .cu files (nvcc) only launch. `dtype` arguments are dtensor::DType values as int (f32 0,
// f64 1, bf16 2, i32 3, i64 4, bool 5), so nvcc never parses runtime/ headers.
// Stateless; thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/strided_index.h"

namespace dtensor::kernels::cuda_launch {

// Op codes: the values of kernels::UnaryOp, BinaryOp and ReduceKind, of dtensor::ReduceOp and of
// RandomDistribution as int, spelled out for nvcc (which reads no runtime/ or kernels/ header);
// the host files that pass them (kernels/cuda/elementwise.cc, nn.cc, memory.cc) static_assert
// every value against the enums. The .cu files name every code from here, never a bare int.
namespace unary_op {
enum : int {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kSquare,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,
  kReluGrad,
  kSign
};
}  // namespace unary_op
namespace binary_op {
enum : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kLogicalAnd,
  kLogicalOr
};
}  // namespace binary_op
namespace reduce_op {
enum : int { kSumOp, kMaxOp, kMinOp };
}  // namespace reduce_op
namespace reduce_kind {
enum : int { kSum, kMean, kMax, kMin, kProd };
}  // namespace reduce_kind
namespace random_kind {
enum : int { kUniform, kNormal, kTruncatedNormal };
}  // namespace random_kind
// softmax's modes (no host enum: the host side names them from here too).
namespace softmax_mode {
enum : int { kSoftmax, kLogSoftmax, kLogSumExp };
}  // namespace softmax_mode

// Throws CudaError "[<kernel>] kernel launch failed: <CUDA's message>" (internal.cc, host code):
// what checked_launch (checked_launch.cuh), under every launch, calls when one fails.
[[noreturn]] void launch_failed(cudaError_t status, const char* kernel);

void unary(int op, int dtype, const void* x, void* y, int64_t n, cudaStream_t stream);
// out[i] = op(a[ia(i)], b[ib(i)]); comparisons write bool.
void binary(int op, int dtype, const void* a, const StridedIndex& ia, const void* b,
            const StridedIndex& ib, void* out, int64_t n, cudaStream_t stream);
void scale(int dtype, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream);
void where(const void* cond, const StridedIndex& ic, int dtype, const void* a,
           const StridedIndex& ia, const void* b, const StridedIndex& ib, void* out, int64_t n,
           cudaStream_t stream);
void cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t stream);
// dst[id(i)] = src[is(i)] for i in [0, n), elements of `elem_size` bytes (1, 2, 4 or 8).
void strided_copy(int elem_size, const void* src, const StridedIndex& is, void* dst,
                  const StridedIndex& id, int64_t n, cudaStream_t stream);
void fill(int dtype, void* dst, int64_t n, double value, cudaStream_t stream);
// dst[i] = op(dst[i], src[i]) (ReduceOp codes: sum 0, max 1, min 2).
void combine_into(int reduce_op, int dtype, void* dst, const void* src, int64_t n,
                  cudaStream_t stream);
// acc = the pairwise tree of inputs (the CPU's order), at most kMaxTreeInputs inputs.
constexpr int kMaxTreeInputs = 64;
void reduce_tree(int reduce_op, int dtype, void* acc, const void* const* inputs, int count,
                 int64_t n, cudaStream_t stream);

// Reduction of x (viewed through `in`, whose last `reduced_rank` dims are the reduced ones and the
// others the kept ones) into `outputs` elements; kind: a reduce_kind code.
void reduce(int kind, int dtype, const void* x, const StridedIndex& kept,
            const StridedIndex& reduced, void* out, int64_t outputs, int64_t per_output,
            cudaStream_t stream);
// x viewed as [outer, n, inner]; out [outer, inner] of i64.
void arg_reduce(bool is_max, int dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                void* out, cudaStream_t stream);
// mode: a softmax_mode code (logsumexp: out [outer, inner]).
void softmax(int mode, int dtype, const void* x, int64_t outer, int64_t n, int64_t inner, void* out,
             cudaStream_t stream);
void softmax_shift(int dtype, const void* max, void* out, int64_t n, cudaStream_t stream);
// logits [rows, classes]; labels i32/i64 [rows]; bad_label: device int64 set to the first row
// with an out-of-range label (left untouched otherwise).
void sparse_xent(int dtype, const void* logits, int label_dtype, const void* labels, int64_t rows,
                 int64_t classes, void* loss, int64_t* bad_row, cudaStream_t stream);
void sparse_xent_grad(int dtype, const void* logits, int label_dtype, const void* labels,
                      const void* grad, int64_t rows, int64_t classes, void* dlogits,
                      cudaStream_t stream);
void one_hot(int index_dtype, const void* indices, int64_t n, int64_t depth, int dtype, double on,
             double off, void* out, cudaStream_t stream);
// rows x d; mean and rstd of `stat_dtype` (f32 for bf16 x).
void layer_norm(int dtype, const void* x, const void* gamma, const void* beta, double eps,
                int64_t rows, int64_t d, void* y, int stat_dtype, void* mean, void* rstd,
                cudaStream_t stream);
void layer_norm_grad(int dtype, const void* dy, const void* x, const void* gamma, int stat_dtype,
                     const void* mean, const void* rstd, int64_t rows, int64_t d, void* dx,
                     void* dgamma, void* dbeta, cudaStream_t stream);
// params [outer, axis_n, inner] -> out [outer, count, inner]; bad_index as in sparse_xent. With
// a (device) row_offset, params holds rows [*row_offset, *row_offset + axis_n) of `limit`: ids
// in [0, limit) outside them give zeros, ids outside [0, limit) are bad.
void gather(int elem_size, const void* params, int64_t outer, int64_t axis_n, int64_t inner,
            int index_dtype, const void* indices, int64_t count, void* out, int64_t* bad_index,
            cudaStream_t stream, const int64_t* row_offset = nullptr, int64_t limit = 0);
// out [outer, axis_n, inner] (zeroed here) += updates [outer, count, inner] at indices. With a
// (device) row_offset, out holds rows [*row_offset, *row_offset + axis_n) and other ids are
// skipped (none is bad). per_chunk > 0 (f32, f64): chunks of that many updates summed each in
// order, the chunk sums added in f64 and rounded once (the CPU's scatter_add_shard_rows).
void scatter_add(int dtype, const void* updates, int64_t outer, int64_t axis_n, int64_t inner,
                 int index_dtype, const void* indices, int64_t count, void* out, int64_t* bad_index,
                 cudaStream_t stream, const int64_t* row_offset = nullptr, int64_t per_chunk = 0);

// out[r, c] += bias[c] then the activation (a unary_op code, or -1) in place, rows x cols.
void bias_activation(int dtype, void* out, const void* bias, int64_t rows, int64_t cols,
                     int activation, cudaStream_t stream);
// Integer matmul (wrapping): a [batch, m, k] x b [batch, k, n] with batch strides (0 = broadcast).
void int_matmul(int dtype, const void* a, int64_t a_batch_stride, bool ta, const void* b,
                int64_t b_batch_stride, bool tb, void* out, int64_t batch, int64_t m, int64_t n,
                int64_t k, bool accumulate, cudaStream_t stream);

// Philox fill of a shard: `kind` a random_kind code; a and b as RandomSpec
// after the CPU's validation (lo, scale, below_hi for uniform reals; lo, range for integers).
struct RandomParams {
  int kind;
  uint32_t key[2];
  double p0, p1, p2;  // uniform real: lo, scale, below_hi; normal: mean, stddev
  int64_t ilo;
  uint64_t irange;  // uniform integers
};
void fill_random(int dtype, void* out, const StridedIndex& global_of_local, int64_t n,
                 const RandomParams& params, cudaStream_t stream);

// Optimizer updates (f32/f64/bf16 through f32), elementwise over n.
void sgd(int dtype, const void* var, const void* grad, void* var_out, int64_t n, double lr,
         cudaStream_t stream);
void sgd_momentum(int dtype, const void* var, const void* grad, const void* vel, void* var_out,
                  void* vel_out, int64_t n, double lr, double momentum, bool nesterov,
                  cudaStream_t stream);
void adam(int dtype, const void* var, const void* grad, const void* m, const void* v, void* var_out,
          void* m_out, void* v_out, int64_t n, double beta1, double beta2, double lr_t,
          double epsilon, double decay, cudaStream_t stream);

}  // namespace dtensor::kernels::cuda_launch
