// Ops on DTensors.
//
// Each op validates its inputs (errors name the op, the shapes and the layouts), asks the
// sharding rule (ops/sharding.h) for the layouts to use, relayouts the inputs, and runs the local
// kernel on every local shard (ops/expand.h). Outputs may be *partial*: matmul over a sharded
// contraction dim and sums over sharded dims return partial sums, and linear ops pass them on, so
// the reduction happens once, where a consumer needs it (or at relayout). Nothing silently
// replicates: an input is only moved when the rule needs it elsewhere, by the cheapest relayout.
//
// All inputs of an op must be on one mesh (MeshError otherwise). Errors name the op as declared
// here ("[layer_norm] ..."), never its attributes. Ops are thread-safe.
//
// This header is the whole op API, one section per op family; each family is implemented in the
// file its section names, where every op has its validation, sharding signature, expansion and
// VJP side by side. ops/README.md says which files a new op (or a new family) touches.
#pragma once

#include <optional>
#include <vector>

#include "dtensor/dtensor.h"
#include "runtime/reduce_op.h"

namespace dtensor {

// ---- Elementwise (ops/elementwise.cc) ----

// Elementwise unary.
DTensor neg(const DTensor& x);
DTensor abs(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor log(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor square(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor sigmoid(const DTensor& x);
DTensor tanh(const DTensor& x);
DTensor gelu(const DTensor& x);
// alpha * x; linear, so partial sums pass through.
DTensor scale(const DTensor& x, double alpha);

// Elementwise binary with NumPy broadcasting; both inputs of one dtype.
DTensor add(const DTensor& a, const DTensor& b);
DTensor sub(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
DTensor pow(const DTensor& a, const DTensor& b);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor minimum(const DTensor& a, const DTensor& b);
DTensor equal(const DTensor& a, const DTensor& b);
DTensor not_equal(const DTensor& a, const DTensor& b);
DTensor less(const DTensor& a, const DTensor& b);
DTensor less_equal(const DTensor& a, const DTensor& b);
DTensor greater(const DTensor& a, const DTensor& b);
DTensor greater_equal(const DTensor& a, const DTensor& b);
DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b);
DTensor cast(const DTensor& x, DType dtype);

// ---- Matmul (ops/matmul.cc) ----

// [..., m, k] x [..., k, n] with broadcast batch dims; transposes swap the last two dims.
DTensor matmul(const DTensor& a, const DTensor& b, bool transpose_a = false,
               bool transpose_b = false);

// ---- Dense layer (ops/matmul.cc) ----

enum class DenseActivation { kNone, kRelu };

// activation(x @ w + b) for x [..., m, k], w [k, n] and b [n], all of one dtype: one kernel per
// shard, with the bias and the ReLU fused into the gemm. Sharding as matmul's, the bias on n.
// When the layouts make the product partial (k sharded), the bias and the activation wait for
// the reduction: the result is then relu(add(matmul(x, w), b)) computed unfused. Gradients for
// all three inputs (the ReLU mask read from the output).
DTensor dense(const DTensor& x, const DTensor& w, const DTensor& b,
              DenseActivation activation = DenseActivation::kNone);

// ---- Reductions (ops/reductions.cc) ----

// Reductions over `axes` (negative counts from the end; empty = all). Over a sharded axis the
// result is partial (sum, max, min) until consumed; mean divides by the global count.
DTensor reduce_sum(const DTensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
DTensor reduce_mean(const DTensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
DTensor reduce_max(const DTensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
DTensor reduce_min(const DTensor& x, std::vector<int64_t> axes = {}, bool keepdims = false);
DTensor argmax(const DTensor& x, int64_t axis, bool keepdims = false);

// ---- Softmax and losses (ops/softmax.cc) ----

// Numerically stable along `axis`, also when that axis is sharded.
DTensor softmax(const DTensor& x, int64_t axis = -1);
DTensor log_softmax(const DTensor& x, int64_t axis = -1);
DTensor logsumexp(const DTensor& x, int64_t axis = -1, bool keepdims = false);
// Per-example loss of logits [..., C] and integer labels [...].
DTensor sparse_softmax_cross_entropy(const DTensor& logits, const DTensor& labels);

// ---- Shape ops (ops/shape_ops.cc) ----

// `shape` may hold one -1, inferred. Sharded dims stay sharded when every dim up to them is
// unchanged (flattening the trailing dims of a batch-sharded tensor moves nothing).
DTensor reshape(const DTensor& x, const Shape& shape);
// NumPy broadcasting of `x` to `shape`.
DTensor broadcast_to(const DTensor& x, const Shape& shape);
// relayout (dtensor/relayout.h), which itself records on active gradient tapes (its VJP
// relayouts the gradient back); kept as the op-API spelling.
DTensor traced_relayout(const DTensor& x, const Layout& layout);
DTensor transpose(const DTensor& x, std::vector<int64_t> perm);

// Joins along `axis` (kept unsharded); the other dims must agree.
DTensor concat(const std::vector<DTensor>& xs, int64_t axis);
// The box at `begin` of extent `size` (-1: to the end). Dims that are cut are gathered first;
// dims taken whole keep their sharding.
DTensor slice(const DTensor& x, const std::vector<int64_t>& begin, const Shape& size);

// ---- Gather and scatter (ops/gather.cc) ----

// Rows of `params` along `axis` (kept unsharded) at integer `indices` (an embedding lookup when
// axis is 0); the result's index dims take the indices' sharding.
DTensor gather(const DTensor& params, const DTensor& indices, int64_t axis = 0);
// The one-hot encoding of integer `indices` along a new last dim of size `depth`.
DTensor one_hot(const DTensor& indices, int64_t depth, DType dtype = DType::kF32);

// ---- Normalisation (ops/normalization.cc) ----

// Normalises over the last dim (kept unsharded) and applies gamma and beta of shape [D].
DTensor layer_norm(const DTensor& x, const DTensor& gamma, const DTensor& beta, double eps = 1e-5);

}  // namespace dtensor
