// Local kernels: the single-device computations that the SPMD op layer runs on every shard. This
// is the device-neutral front: each function checks that its tensor inputs are on one device type
// (InvalidArgumentError otherwise, e.g. "[add] inputs are on CPU:0 and GPU:0 (f32[2,3] and
// f32[3]); a kernel runs on one device type") and dispatches with a switch on it to the CPU
// implementation (kernels/cpu/cpu_kernels.h) or the entry a GPU backend registered in the GPU
// table (kernels/gpu/gpu_kernels.h); where there is none (a build without CUDA, or a kernel the
// backend lacks) it throws UnimplementedError "[conv2d] has no GPU kernel in this build". The
// enums and option structs are in kernel_types.h.
//
// Contract, common to every function here and to every backend:
// - Inputs are dense row-major Tensors; outputs are new Tensors from the buffer pool
//   (Tensor::empty) tagged with the device of the first tensor argument (scatter_add: of
//   `updates`). No function writes to its inputs, except matmul_accumulate, which adds into `out`
//   in place.
// - Dtypes: f32 and f64 everywhere a float makes sense; bf16 is computed in f32 and rounded to
//   nearest even on output; i32 and i64 where the op is meaningful on integers (integer arithmetic
//   wraps around like unsigned arithmetic, and integer division truncates toward zero); bool for
//   comparison results, where's condition, logical ops, max/min reductions and cast. Floating
//   max/min (binary and reductions) propagate NaN.
// - Errors: user mistakes throw dtensor::Error subclasses whose message starts with "[<op>] " and
//   names the shapes and dtypes involved, e.g. "[matmul] inner dims differ: f32[2,3] x f32[4,5]".
//   ShapeError for shapes that do not fit together, DTypeError for unsupported or mismatched
//   dtypes, InvalidArgumentError for bad axes, indices, labels and other values.
// - Threading: every kernel is single-threaded and stateless, so different threads may run kernels
//   on different tensors concurrently. The exception is matmul (and dense, matmul_accumulate):
//   f32 and bf16 products run through oneDNN (kernels/cpu/matmul_onednn.h), split into up to
//   MatmulOptions::blas_threads blocks on the runtime's thread pool (0: the last set_blas_threads
//   value, else every core), with primitives cached per calling thread; f64 (and the shapes where
//   OpenBLAS measured faster) run inside OpenBLAS and its thread pool, whose thread count is
//   process-global (OpenBLAS 0.3.21), so set it with set_blas_threads (or blas_threads, all
//   devices agreeing on the value) before running devices in parallel. DTENSOR_ONEDNN=0 in the
//   environment keeps every product on OpenBLAS.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels {

// ---- Elementwise -----------------------------------------------------------------------------

// f32/f64/bf16 for every op; i32/i64 for neg, abs, square, relu, relu_grad and sign. f32 exp and
// tanh (and sigmoid and gelu through them) use vectorizable implementations accurate to about
// 1 ulp instead of the C library's; f64 uses the C library.
Tensor unary(UnaryOp op, const Tensor& x);

// NumPy broadcasting; both operands must have the same dtype (DTypeError otherwise).
// Arithmetic (add, sub, mul, div, maximum, minimum): f32, f64, bf16, i32, i64; integer division by
// zero throws InvalidArgumentError. pow: f32, f64, bf16. Comparisons: every dtype but bool, plus
// bool for equal/not_equal; they return bool. Logical ops: bool only.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

// The NumPy broadcast of two shapes; ShapeError naming `op` if they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// alpha * x in x's dtype: f32, f64, or bf16 (computed in f32). alpha is first rounded to f32 for
// f32 and bf16.
Tensor scale(const Tensor& x, double alpha);

// cond ? a : b elementwise, broadcasting all three; cond must be bool, a and b of one dtype.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Converts every element. Float to integer truncates toward zero and saturates (NaN gives 0);
// anything to bool is x != 0; bool to anything is 0 or 1; to bf16 rounds to nearest even.
Tensor cast(const Tensor& x, DType dtype);

// Broadcasts x to `shape` (NumPy rules: x's dims, right-aligned, must be 1 or equal).
Tensor broadcast_to(const Tensor& x, const Shape& shape);

// Sums x down to `shape`, which must broadcast to x's shape: the adjoint of broadcast_to.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- Matmul ----------------------------------------------------------------------------------

// [m,k] x [k,n] -> [m,n], and batched [...,m,k] x [...,k,n] -> [...,m,n] with the batch dims
// broadcast (a 2-D operand broadcasts over the other's batch). f32 and bf16 (f32 accumulation)
// through oneDNN or cblas_sgemm, f64 through cblas_dgemm, i32/i64 through a blocked loop
// (wrapping).
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options = {});

// out += a x b, in place (gemm with beta = 1), to fuse partial sums. `out` must be f32 or f64
// with exactly the shape matmul would return, must not share storage with a or b, and a and b
// must have out's dtype (or be bf16 when out is f32: mixed precision accumulation). Writes to
// out's storage even if other Tensor handles share it.
void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out,
                       const MatmulOptions& options = {});

// Sets OpenBLAS's thread count (n >= 1) if it differs from the last value set through this
// function. The setting is process-global: callers set it before running devices in parallel, and
// concurrent matmuls must agree on it.
void set_blas_threads(int n);

// Fused y = activation(x @ w + bias): matmul's shapes and options, bias of shape [n] broadcast
// along the rows, then the activation. For f32 and bf16 one oneDNN primitive adds the bias and
// applies a ReLU as post-ops (other activations run in place after it, in f32 for bf16); f64
// starts the gemm from the bias rows (beta = 1). bias may be null and activation empty; the
// activation must support the dtype (DTypeError).
Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
             std::optional<UnaryOp> activation, const MatmulOptions& options = {});

// ---- Reductions ------------------------------------------------------------------------------

// Reduces `axes` (negative counts from the end; empty means all axes; duplicates or out-of-range
// axes throw InvalidArgumentError). Float sums, means and products accumulate in f64. Integer
// results wrap; the mean of integers truncates toward zero. bool supports max (any) and min (all).
// An empty reduction gives sum 0, prod 1, max -inf (integers: lowest), min +inf (integers: max),
// mean NaN (integers: 0).
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);

// Index of the largest (smallest) element along `axis`, as i64; the first one on ties, the first
// NaN if any. The axis must not be empty (InvalidArgumentError). Not for bool.
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims);

// ---- Neural-network ops (f32, f64, bf16 through f32) -----------------------------------------

// exp(x - shift) / sum(exp(x - shift)) along `axis`, shift = softmax_shift(max(x)); log_softmax
// is (x - shift) - log(sum(exp(x - shift))). Non-finite values, per row along `axis`:
//   - a NaN makes every output of the row NaN;
//   - else a +inf: logsumexp +inf; softmax NaN at the +inf elements (inf / inf) and 0 elsewhere;
//     log_softmax NaN at the +inf elements and -inf elsewhere;
//   - else all -inf: logsumexp -inf; softmax and log_softmax NaN (0 / 0);
//   - else -inf elements: softmax 0, log_softmax -inf there.
// The sharded expansions (ops/softmax.cc) compute the same pieces from a global max and sum, so
// every layout gives these results.
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);
// log(sum(exp(x))) along axis, stable; -inf for an empty axis.
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims);
// The shift the softmax family subtracts, elementwise from the max of a row: the max when finite,
// the largest finite value when it is +inf (no finite exp overflows), 0 when it is -inf or NaN.
Tensor softmax_shift(const Tensor& max);

// Per-example loss -log_softmax(logits)[label] for logits [..., C] and i32/i64 labels [...].
// Labels outside [0, C) throw InvalidArgumentError naming the label and its position.
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
// Gradient w.r.t. logits given the upstream gradient of the per-example loss (shape of labels,
// dtype of logits): (softmax(logits) - one_hot(labels)) * grad[..., None].
Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& grad);

// indices (i32/i64) [...] -> [..., depth] of `dtype`, `on` at the index and `off` elsewhere;
// out-of-range indices give rows of `off` (TF semantics). depth >= 0.
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on = 1.0,
               double off = 0.0);

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance), with
// gamma and beta of shape [D]. mean and rstd have shape [..., 1] and x's dtype (f32 for bf16).
LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);

LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd);

// ---- Data movement (every dtype) -------------------------------------------------------------

// out.shape[i] = x.shape[perm[i]]; perm must be a permutation of 0..rank-1.
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);

// Joins tensors of one dtype and rank along `axis` (negative counts from the end); the other dims
// must agree.
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);

// The box at `begin` of extent `size`; a size of -1 extends to the end of the dim.
Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size);

// Takes rows of `params` along `axis` at i32/i64 `indices` (like tf.gather / jnp.take):
// out.shape = params.shape[:axis] + indices.shape + params.shape[axis+1:]. Indices outside
// [0, params.shape[axis]) throw InvalidArgumentError.
Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis);

// Pads each dim with (before, after) elements of `value` (converted to x's dtype); paddings are
// non-negative. The adjoint of slice.
Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
           double value = 0.0);

// A zero tensor of `shape` and updates' dtype with `updates` added at `indices` along `axis`:
// updates.shape = shape[:axis] + indices.shape + shape[axis+1:]. The adjoint of gather;
// repeated indices accumulate. Not for bool.
Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis);

// ---- CNN ops (f32, f64, bf16 through f32; NHWC, HWIO; kernels/conv_params.h) ------------

// y[n, oh, ow, o] = sum over (kh, kw, c of o's group) of x[n, ih, iw, c] * w[kh, kw, c, o] with
// ih = oh * stride_h - pad_top + kh * dilation_h (iw alike), padded positions reading zero.
// ShapeError for ranks other than 4, channels that do not match w or do not split into groups,
// or a window larger than the padded input; DTypeError for mismatched or non-float dtypes.
// f32 runs on oneDNN (a primitive per geometry, cached) with params.threads threads; f64 on a
// direct loop (the reference the gradient checks use).
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& params);
// The gradient of conv2d with respect to x (of `x_shape`), given w and the output gradient dy.
Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                             const Conv2dParams& params);
// The gradient of conv2d with respect to w (of `w_shape`), given x and dy.
Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                              const Conv2dParams& params);

// Max and average over each window of every channel; the gradients route dy back (max: to the
// first maximum of each window, as TF; avg: dy / count to each unpadded position).
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy, const Pool2dParams& params);

// Local response normalisation over the last dim (LrnParams) and its gradient given dy.
Tensor local_response_normalization(const Tensor& x, const LrnParams& params);
Tensor local_response_normalization_grad(const Tensor& x, const Tensor& dy,
                                         const LrnParams& params);

}  // namespace dtensor::kernels

#include "kernels/kernels_inl.h"  // IWYU pragma: export
