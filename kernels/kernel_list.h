// The kernel list: the one place where a kernel's name and signature are written. Every other
// appearance is generated from it by including this file with one or more of these macros
// defined (an undefined one expands to nothing):
//
//   DTENSOR_KERNEL(ret, name, params, args, op, devices, check)    the front (kernels/kernels.h)
//   DTENSOR_OPTIMIZER_KERNEL(...)        the same columns: kernels/optimizer_update.h
//
// The runtime's element loops (block copies and reductions, fills) are listed in the same columns
// one floor down, in runtime/element_loop_list.h; the GPU table below includes their entries.
//
// with, per kernel: the return type; the name (of the front function, of cpu::name and of the
// gpu::Table field); the parameters, defaults written DTENSOR_DEFAULT(value) (a site that may carry
// defaults defines DTENSOR_DEFAULT(v) as `= v`); the arguments to forward; the op as errors name
// it (a string, or the op enum: kernels/dispatch.h op_name); the tensors whose device type picks
// the backend (all must agree); and the front's argument check, run once before dispatch (empty
// for none; backends may then only assert).
//
// Generated from it: the front's inline definitions (kernels/kernels.h, through
// DTENSOR_KERNEL_FRONT in kernels/dispatch.h), the CPU declarations (kernels/cpu/cpu_kernels.h)
// and the fields of the GPU table (kernels/gpu/gpu_kernels.h). A kernel's contract is the comment
// above its line; the contract common to all of them is in kernels/kernels.h.
//
// No include guard: included once per generated part.

#ifndef DTENSOR_KERNEL
#define DTENSOR_KERNEL(ret, name, params, args, op, devices, check)
#endif
#ifndef DTENSOR_OPTIMIZER_KERNEL
#define DTENSOR_OPTIMIZER_KERNEL(ret, name, params, args, op, devices, check)
#endif
#ifndef DTENSOR_DEFAULT
#define DTENSOR_DEFAULT(value)
#endif

// ---- Elementwise -----------------------------------------------------------------------------

// f32/f64/bf16 for every op; i32/i64 for neg, abs, square, relu, relu_grad and sign. f32 exp and
// tanh (and sigmoid and gelu through them) use vectorizable implementations accurate to about
// 1 ulp instead of the C library's; f64 uses the C library.
DTENSOR_KERNEL(Tensor, unary, (UnaryOp op, const Tensor& x), (op, x), op, (x), )

// NumPy broadcasting; both operands must have the same dtype (DTypeError otherwise).
// Arithmetic (add, sub, mul, div, maximum, minimum): f32, f64, bf16, i32, i64; integer division by
// zero throws InvalidArgumentError. pow: f32, f64, bf16. Comparisons: every dtype but bool, plus
// bool for equal/not_equal; they return bool. Logical ops: bool only.
DTENSOR_KERNEL(Tensor, binary, (BinaryOp op, const Tensor& a, const Tensor& b), (op, a, b), op,
               (a, b), )

// alpha * x in x's dtype: f32, f64, or bf16 (computed in f32). alpha is first rounded to f32 for
// f32 and bf16.
DTENSOR_KERNEL(Tensor, scale, (const Tensor& x, double alpha), (x, alpha), "scale", (x), )

// cond ? a : b elementwise, broadcasting all three; cond must be bool, a and b of one dtype.
DTENSOR_KERNEL(Tensor, where, (const Tensor& cond, const Tensor& a, const Tensor& b),
               (cond, a, b), "where", (cond, a, b), )

// Converts every element. Float to integer truncates toward zero and saturates (NaN gives 0);
// anything to bool is x != 0; bool to anything is 0 or 1; to bf16 rounds to nearest even.
DTENSOR_KERNEL(Tensor, cast, (const Tensor& x, DType dtype), (x, dtype), "cast", (x), )

// Broadcasts x to `shape` (NumPy rules: x's dims, right-aligned, must be 1 or equal).
DTENSOR_KERNEL(Tensor, broadcast_to, (const Tensor& x, const Shape& shape), (x, shape),
               "broadcast_to", (x), )

// Sums x down to `shape`, which must broadcast to x's shape: the adjoint of broadcast_to.
DTENSOR_KERNEL(Tensor, sum_to, (const Tensor& x, const Shape& shape), (x, shape), "sum_to",
               (x), )

// ---- Matmul ----------------------------------------------------------------------------------

// [m,k] x [k,n] -> [m,n], and batched [...,m,k] x [...,k,n] -> [...,m,n] with the batch dims
// broadcast (a 2-D operand broadcasts over the other's batch). f32 and bf16 (f32 accumulation)
// through oneDNN or cblas_sgemm, f64 through cblas_dgemm, i32/i64 through a blocked loop
// (wrapping).
DTENSOR_KERNEL(Tensor, matmul,
               (const Tensor& a, const Tensor& b,
                const MatmulOptions& options DTENSOR_DEFAULT({})),
               (a, b, options), "matmul", (a, b), )

// out += a x b, in place (gemm with beta = 1), to fuse partial sums. `out` must be f32 or f64
// with exactly the shape matmul would return, must not share storage with a or b, and a and b
// must have out's dtype (or be bf16 when out is f32: mixed precision accumulation). Writes to
// out's storage even if other Tensor handles share it.
DTENSOR_KERNEL(void, matmul_accumulate,
               (const Tensor& a, const Tensor& b, Tensor& out,
                const MatmulOptions& options DTENSOR_DEFAULT({})),
               (a, b, out, options), "matmul_accumulate", (a, b, out), )

// Fused y = activation(x @ w + bias): matmul's shapes and options, bias of shape [n] broadcast
// along the rows, then the activation. For f32 and bf16 one oneDNN primitive adds the bias and
// applies a ReLU as post-ops (other activations run in place after it, in f32 for bf16); f64
// starts the gemm from the bias rows (beta = 1). bias may be null and activation empty; the
// activation must support the dtype (DTypeError).
DTENSOR_KERNEL(Tensor, dense,
               (const Tensor& x, const Tensor& w, const Tensor* bias,
                std::optional<UnaryOp> activation,
                const MatmulOptions& options DTENSOR_DEFAULT({})),
               (x, w, bias, activation, options), "dense", (x, w, bias), )

// ---- Reductions ------------------------------------------------------------------------------

// Reduces `axes` (negative counts from the end; empty means all axes; duplicates or out-of-range
// axes throw InvalidArgumentError). Float sums, means and products accumulate in f64. Integer
// results wrap; the mean of integers truncates toward zero. bool supports max (any) and min (all).
// An empty reduction gives sum 0, prod 1, max -inf (integers: lowest), min +inf (integers: max),
// mean NaN (integers: 0).
DTENSOR_KERNEL(Tensor, reduce,
               (ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes,
                bool keepdims),
               (kind, x, axes, keepdims), kind, (x), )

// Index of the largest (smallest) element along `axis`, as i64; the first one on ties, the first
// NaN if any. The axis must not be empty (InvalidArgumentError). Not for bool.
DTENSOR_KERNEL(Tensor, argmax, (const Tensor& x, int64_t axis, bool keepdims),
               (x, axis, keepdims), "argmax", (x), )
DTENSOR_KERNEL(Tensor, argmin, (const Tensor& x, int64_t axis, bool keepdims),
               (x, axis, keepdims), "argmin", (x), )

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
DTENSOR_KERNEL(Tensor, softmax, (const Tensor& x, int64_t axis), (x, axis), "softmax", (x), )
DTENSOR_KERNEL(Tensor, log_softmax, (const Tensor& x, int64_t axis), (x, axis), "log_softmax",
               (x), )
// log(sum(exp(x))) along axis, stable; -inf for an empty axis.
DTENSOR_KERNEL(Tensor, logsumexp, (const Tensor& x, int64_t axis, bool keepdims),
               (x, axis, keepdims), "logsumexp", (x), )
// The shift the softmax family subtracts, elementwise from the max of a row: the max when finite,
// the largest finite value when it is +inf (no finite exp overflows), 0 when it is -inf or NaN.
DTENSOR_KERNEL(Tensor, softmax_shift, (const Tensor& max), (max), "softmax_shift", (max), )

// Per-example loss -log_softmax(logits)[label] for logits [..., C] and i32/i64 labels [...].
// Labels outside [0, C) throw InvalidArgumentError naming the label and its position.
DTENSOR_KERNEL(Tensor, sparse_softmax_cross_entropy, (const Tensor& logits, const Tensor& labels),
               (logits, labels), "sparse_softmax_cross_entropy", (logits, labels),
               checks::cross_entropy("sparse_softmax_cross_entropy", logits, labels))
// Gradient w.r.t. logits given the upstream gradient of the per-example loss (shape of labels,
// dtype of logits): (softmax(logits) - one_hot(labels)) * grad[..., None].
DTENSOR_KERNEL(Tensor, sparse_softmax_cross_entropy_grad,
               (const Tensor& logits, const Tensor& labels, const Tensor& grad),
               (logits, labels, grad), "sparse_softmax_cross_entropy_grad",
               (logits, labels, grad),
               checks::cross_entropy_grad("sparse_softmax_cross_entropy_grad", logits, labels,
                                          grad))

// indices (i32/i64) [...] -> [..., depth] of `dtype`, `on` at the index and `off` elsewhere;
// out-of-range indices give rows of `off` (TF semantics). depth >= 0.
DTENSOR_KERNEL(Tensor, one_hot,
               (const Tensor& indices, int64_t depth, DType dtype,
                double on DTENSOR_DEFAULT(1.0), double off DTENSOR_DEFAULT(0.0)),
               (indices, depth, dtype, on, off), "one_hot", (indices),
               checks::one_hot(indices, depth))

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance), with
// gamma and beta of shape [D]. mean and rstd have shape [..., 1] and x's dtype (f32 for bf16).
DTENSOR_KERNEL(LayerNormResult, layer_norm,
               (const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps),
               (x, gamma, beta, eps), "layer_norm", (x, gamma, beta), )
DTENSOR_KERNEL(LayerNormGrad, layer_norm_grad,
               (const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                const Tensor& rstd),
               (dy, x, gamma, mean, rstd), "layer_norm_grad", (dy, x, gamma, mean, rstd), )

// ---- Attention (kernels/cpu/attention.cc) ----------------------------------------------------

// softmax(q k^T / sqrt(D) + mask) v over the last two dims of q [..., Tq, D], k [..., Tk, D] and
// v [..., Tk, Dv] (one batch shape, f32 or f64; the mask keeps keys j <= i when causal, which needs
// Tq == Tk): [..., Tq, Dv]. Fused: blockwise over the keys with an online softmax, so no [Tq, Tk]
// score matrix is made; each batch row is computed alike whatever the call holds (fixed blocks and
// summation order), so the bits do not depend on how the batch is split.
DTENSOR_KERNEL(Tensor, attention, (const Tensor& q, const Tensor& k, const Tensor& v, bool causal),
               (q, k, v, causal), "attention", (q, k, v),
               checks::attention("attention", q, k, v, causal))
// Its gradient for dy (of y's shape) and the forward's y: recomputes the probabilities block by
// block and returns dq, dk and dv packed per batch row, [..., Tq*D + Tk*D + Tk*Dv].
DTENSOR_KERNEL(Tensor, attention_grad,
               (const Tensor& dy, const Tensor& q, const Tensor& k, const Tensor& v,
                const Tensor& y, bool causal),
               (dy, q, k, v, y, causal), "attention_grad", (dy, q, k, v, y),
               checks::attention_grad("attention_grad", dy, q, k, v, y, causal))

// ---- Data movement (every dtype) -------------------------------------------------------------

// out.shape[i] = x.shape[perm[i]]; perm must be a permutation of 0..rank-1.
DTENSOR_KERNEL(Tensor, transpose, (const Tensor& x, const std::vector<int64_t>& perm), (x, perm),
               "transpose", (x), checks::transpose(x, perm))

// Joins tensors of one dtype and rank along `axis` (negative counts from the end); the other dims
// must agree.
DTENSOR_KERNEL(Tensor, concat, (const std::vector<Tensor>& xs, int64_t axis), (xs, axis),
               "concat", (xs), checks::concat(xs, axis))

// The box at `begin` of extent `size`; a size of -1 extends to the end of the dim.
DTENSOR_KERNEL(Tensor, slice,
               (const Tensor& x, const std::vector<int64_t>& begin, const Shape& size),
               (x, begin, size), "slice", (x), checks::slice(x, begin, size))

// Takes rows of `params` along `axis` at i32/i64 `indices` (like tf.gather / jnp.take):
// out.shape = params.shape[:axis] + indices.shape + params.shape[axis+1:]. Indices outside
// [0, params.shape[axis]) throw InvalidArgumentError.
DTENSOR_KERNEL(Tensor, gather, (const Tensor& params, const Tensor& indices, int64_t axis),
               (params, indices, axis), "gather", (params, indices),
               checks::gather(params, indices, axis))

// Pads each dim with (before, after) elements of `value` (converted to x's dtype); paddings are
// non-negative. The adjoint of slice.
DTENSOR_KERNEL(Tensor, pad,
               (const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
                double value DTENSOR_DEFAULT(0.0)),
               (x, paddings, value), "pad", (x), checks::pad(x, paddings))

// A zero tensor of `shape` and updates' dtype with `updates` added at `indices` along `axis`:
// updates.shape = shape[:axis] + indices.shape + shape[axis+1:]. The adjoint of gather;
// repeated indices accumulate. Not for bool.
DTENSOR_KERNEL(Tensor, scatter_add,
               (const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis),
               (shape, indices, updates, axis), "scatter_add", (updates, indices),
               checks::scatter_add(shape, indices, updates, axis))

// The two halves of a vocab-parallel embedding, on a table split by rows. `shard` is an i64 [2]
// on the shard's device, (o, R): the shard holds rows [o, o + R) of the table (a tensor, so that
// each device's pair travels with its shards).
// The masked gather: params [R, ...] -> out of indices.shape + params.shape[1:], params[id - o]
// for the ids in the shard and zero rows for the other ids (another shard's rows). Ids outside
// [0, vocab) throw gather's InvalidArgumentError ("[gather] index 9 at position [1] is outside
// [0, 8)").
DTENSOR_KERNEL(Tensor, gather_shard_rows,
               (const Tensor& params, const Tensor& indices, const Tensor& shard, int64_t vocab),
               (params, indices, shard, vocab), "gather", (params, indices, shard),
               checks::gather_shard_rows(params, indices, shard, vocab))

// Its adjoint: zeros of [R] + updates.shape[indices.rank():] with updates' row j added at row
// ids[j] - o for the ids in the shard; the other ids are skipped. Each row sums its updates in
// index order (one fixed order, whatever the backend). Not for bool. With chunk_rows > 0 (f32
// and f64), the batch-invariant sum of ops/expand.h (Stacking::chunk_rows) done in place: the
// ids' dim 0 is cut into chunks of chunk_rows, each chunk summed so, and the chunk sums added
// in order in f64 and rounded once: the bits of the chunked fold, without a table-sized
// temporary per chunk.
DTENSOR_KERNEL(Tensor, scatter_add_shard_rows,
               (const Tensor& indices, const Tensor& updates, const Tensor& shard,
                int64_t chunk_rows DTENSOR_DEFAULT(0)),
               (indices, updates, shard, chunk_rows), "scatter_add", (updates, indices, shard),
               checks::scatter_add_shard_rows(indices, updates, shard, chunk_rows))

// ---- CNN ops (f32, f64, bf16; NHWC, HWIO; kernels/conv_params.h) ---------------------------

// y[n, oh, ow, o] = sum over (kh, kw, c of o's group) of x[n, ih, iw, c] * w[kh, kw, c, o] with
// ih = oh * stride_h - pad_top + kh * dilation_h (iw alike), padded positions reading zero.
// ShapeError for ranks other than 4, channels that do not match w or do not split into groups,
// or a window larger than the padded input; DTypeError for mismatched or non-float dtypes, or
// params.f32_output with operands that are not bf16. f32 runs on oneDNN (a primitive per geometry,
// cached) with params.threads threads; f64 on a direct loop (the reference the gradient checks
// use). bf16 (all three kernels) multiplies in bf16 and sums in f32 on oneDNN where the CPU has
// AVX512_BF16 or AMX (elsewhere on f32 copies: the same products and sums), then rounds the
// result to bf16, or returns the f32 sums as they are with params.f32_output.
DTENSOR_KERNEL(Tensor, conv2d, (const Tensor& x, const Tensor& w, const Conv2dParams& params),
               (x, w, params), "conv2d", (x, w), checks::conv2d(x, w, params))
// Fused y = activation(conv2d(x, w) + bias): conv2d's shapes, params, dtypes and errors, and a
// bias [o] in y's dtype (f32 under params.f32_output): DTypeError or ShapeError otherwise. For f32
// and bf16 one oneDNN primitive adds the bias and applies a ReLU as post-ops (other activations
// run after it); elsewhere (f64, or a case oneDNN has no kernel for) the bias and the activation
// follow conv2d in y's dtype. The activation must support the dtype (DTypeError).
DTENSOR_KERNEL(Tensor, conv2d_bias,
               (const Tensor& x, const Tensor& w, const Tensor& bias,
                std::optional<UnaryOp> activation, const Conv2dParams& params),
               (x, w, bias, activation, params), "conv2d_bias", (x, w, bias),
               checks::conv2d_bias(x, w, bias, params))
// The gradient of conv2d with respect to x (of `x_shape`), given w and the output gradient dy.
DTENSOR_KERNEL(Tensor, conv2d_backprop_input,
               (const Shape& x_shape, const Tensor& w, const Tensor& dy,
                const Conv2dParams& params),
               (x_shape, w, dy, params), "conv2d_backprop_input", (w, dy),
               checks::conv2d_backprop_input(x_shape, w, dy, params))
// The gradient of conv2d with respect to w (of `w_shape`), given x and dy.
DTENSOR_KERNEL(Tensor, conv2d_backprop_filter,
               (const Tensor& x, const Shape& w_shape, const Tensor& dy,
                const Conv2dParams& params),
               (x, w_shape, dy, params), "conv2d_backprop_filter", (x, dy),
               checks::conv2d_backprop_filter(x, w_shape, dy, params))

// Max and average over each window of every channel; the gradients route dy back (max: to the
// first maximum of each window, as TF; avg: dy / count to each unpadded position).
DTENSOR_KERNEL(Tensor, max_pool2d, (const Tensor& x, const Pool2dParams& params), (x, params),
               "max_pool2d", (x), )
DTENSOR_KERNEL(Tensor, max_pool2d_grad,
               (const Tensor& x, const Tensor& dy, const Pool2dParams& params), (x, dy, params),
               "max_pool2d_grad", (x, dy), )
DTENSOR_KERNEL(Tensor, avg_pool2d, (const Tensor& x, const Pool2dParams& params), (x, params),
               "avg_pool2d", (x), )
DTENSOR_KERNEL(Tensor, avg_pool2d_grad,
               (const Shape& x_shape, const Tensor& dy, const Pool2dParams& params),
               (x_shape, dy, params), "avg_pool2d_grad", (dy), )

// Local response normalisation over the last dim (LrnParams) and its gradient given dy.
DTENSOR_KERNEL(Tensor, local_response_normalization,
               (const Tensor& x, const LrnParams& params), (x, params),
               "local_response_normalization", (x), )
DTENSOR_KERNEL(Tensor, local_response_normalization_grad,
               (const Tensor& x, const Tensor& dy, const LrnParams& params), (x, dy, params),
               "local_response_normalization_grad", (x, dy), )

// ---- The optimizers' fused element updates (kernels/optimizer_update.h) ----------------------

// var_out = var - lr * grad. f32 or f64, equal shapes (checked by the optimizer).
DTENSOR_OPTIMIZER_KERNEL(void, sgd_update,
                         (const Tensor& var, const Tensor& grad, Tensor& var_out, double lr),
                         (var, grad, var_out, lr), "SGD", (var, grad, var_out), )
// Keras momentum: velocity_out = momentum * velocity - lr * grad; var_out = var + velocity_out
// (Nesterov: var + momentum * velocity_out - lr * grad).
DTENSOR_OPTIMIZER_KERNEL(void, sgd_momentum_update,
                         (const Tensor& var, const Tensor& grad, const Tensor& velocity,
                          Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                          bool nesterov),
                         (var, grad, velocity, var_out, velocity_out, lr, momentum, nesterov),
                         "SGD", (var, grad, velocity, var_out, velocity_out), )
// m_out = b1 m + (1 - b1) g; v_out = b2 v + (1 - b2) g^2;
// var_out = var * decay - lr_t * m_out / (sqrt(v_out) + epsilon). Large tensors are split over
// the thread pool (not from inside a worker).
DTENSOR_OPTIMIZER_KERNEL(void, adam_update,
                         (const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                          Tensor& var_out, Tensor& m_out, Tensor& v_out,
                          const AdamStepParams& params),
                         (var, grad, m, v, var_out, m_out, v_out, params), "Adam",
                         (var, grad, m, v, var_out, m_out, v_out), )

#undef DTENSOR_KERNEL
#undef DTENSOR_OPTIMIZER_KERNEL
#undef DTENSOR_DEFAULT
