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

#include <array>
#include <cstdint>
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
// unchanged (flattening the trailing dims of a batch-sharded tensor moves nothing), or when every
// dim before them is and they are split or merged evenly (both sizes divisible by the shard
// count: [B, T, D] with D sharded to [B, T, H, D/H] with H sharded, and back).
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

// ---- Transformer (ops/transformer.cc) ----
//
// Compositions of the ops above (their VJPs are those ops'), shaped so that sharded dims stay
// sharded: a vocab-sharded table, heads sharded over a mesh dim, a sharded model dim.

// Rows of table [V, D] at integer ids [...] -> [..., D]. A table sharded on V is vocab-parallel:
// each device gathers the ids in its rows (zeros for the others, uneven and empty shards
// included), giving a partial sum over V's mesh dim that its consumer reduces; the gradient
// scatter-adds into each device's rows, batch-invariantly (ops/README.md). Ids outside [0, V)
// throw gather's InvalidArgumentError on every layout.
DTensor embedding(const DTensor& table, const DTensor& ids);
// x * rsqrt(mean(x^2 over the last dim) + eps) * gamma, gamma of shape [D].
DTensor rms_norm(const DTensor& x, const DTensor& gamma, double eps = 1e-6);
// Rotary position embedding of x [..., T, D] (D even; positions 0..T-1 along dim -2): the halves
// (x1, x2) of the last dim rotate by angle p * base^(-i / (D/2)) into (x1 cos - x2 sin,
// x1 sin + x2 cos).
DTensor rotary_embedding(const DTensor& x, double base = 10000.0);
// softmax(q kᵀ / sqrt(D) (+ causal mask)) v for q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv];
// the leading dims (batch, heads) keep their sharding. causal: query i sees keys j <= i.
DTensor scaled_dot_product_attention(const DTensor& q, const DTensor& k, const DTensor& v,
                                     bool causal = true);
// The same attention through the fused kernel (kernels::attention): blockwise over the keys with
// an online softmax, so no [Tq, Tk] score matrix is made, and a VJP that recomputes the
// probabilities block by block (kernels::attention_grad). f32 and f64, rank >= 3. The leading
// dims keep their sharding; the last two are gathered whole. Each batch row is computed alike on
// every mesh, so the bits do not depend on how batch and heads are split.
DTensor fused_attention(const DTensor& q, const DTensor& k, const DTensor& v, bool causal = true);

// ---- Conv (ops/conv.cc) ----
//
// Activations are NHWC [n, h, w, c] and filters HWIO [kh, kw, c / groups, o], as in TF. f32 and
// bf16 (accumulated in f32), f64 for gradient checks. Sharding follows the letters: n sharded
// (data parallel) needs no communication; o sharded (the filter's last dim) gives an output
// sharded on channels; c sharded on both x and the filter gives a partial-sum output, reduced
// where a consumer needs it; with groups, whole groups may be sharded. A sharded h or w stays
// sharded: one halo exchange per sharded dim and direction (ops/README.md, spatial sharding).

// How H and W are padded (TF's rules). kValid: none. kSame: the output has ceil(in / stride)
// positions; the padding needed is split evenly, the odd one at the bottom/right. kExplicit: the
// given element counts, each >= 0.
struct Padding2d {
  enum Kind : uint8_t { kValid, kSame, kExplicit };
  Kind kind = kValid;
  int64_t top = 0, bottom = 0, left = 0, right = 0;  // kExplicit only
};

struct Conv2dOptions {
  std::array<int64_t, 2> strides = {1, 1};    // along h and w, >= 1
  std::array<int64_t, 2> dilations = {1, 1};  // along h and w, >= 1
  Padding2d padding;
  int64_t groups = 1;  // divides c and o; c / groups is the filter's third dim
};

// y[n, oh, ow, o] = sum over kh, kw and the c of o's group of x[n, ih, iw, c] * w[kh, kw, c, o].
DTensor conv2d(const DTensor& x, const DTensor& w, const Conv2dOptions& options = {});
// activation(conv2d(x, w) + b) for b [o] of x's dtype: one kernel per shard, the bias and the ReLU
// fused into the convolution (as dense), the bias sharded as the output channels. When the
// layouts make the convolution partial (c sharded) or h or w are sharded (halo exchange), the
// bias and the activation run as ops of their own after it.
DTensor conv2d(const DTensor& x, const DTensor& w, const DTensor& b, DenseActivation activation,
               const Conv2dOptions& options = {});
// The gradient of conv2d with respect to its input (of `input_shape`), given the filter and the
// output gradient dy. Linear in w and dy; dy's o sharded gives a partial-sum result.
DTensor conv2d_backprop_input(const Shape& input_shape, const DTensor& w, const DTensor& dy,
                              const Conv2dOptions& options = {});
// The gradient of conv2d with respect to its filter (of `filter_shape`), given x and dy. Linear in
// both; a batch-sharded x and dy give a partial-sum result (the data-parallel gradient sum).
DTensor conv2d_backprop_filter(const DTensor& x, const Shape& filter_shape, const DTensor& dy,
                               const Conv2dOptions& options = {});

// ---- Pooling (ops/pooling.cc) ----
//
// Windows over h and w of every channel of NHWC x; n and c shard freely (no communication),
// sharded h or w stay sharded (halo exchange, as conv2d). Padded positions never count (TF): max
// ignores them and avg divides by the number of unpadded positions in each window.

struct Pool2dOptions {
  std::array<int64_t, 2> window = {2, 2};   // >= 1
  std::array<int64_t, 2> strides = {2, 2};  // >= 1
  Padding2d padding;                        // kExplicit paddings must be smaller than the window
};

DTensor max_pool2d(const DTensor& x, const Pool2dOptions& options = {});
DTensor avg_pool2d(const DTensor& x, const Pool2dOptions& options = {});

// ---- CNN layers (ops/nn.cc) ----

// TF's tf.nn.local_response_normalization over the last (channel) dim of x (rank 4), kept whole:
//   y[c] = x[c] / (bias + alpha * sum_{|c' - c| <= depth_radius} x[c']^2)^beta
DTensor local_response_normalization(const DTensor& x, int64_t depth_radius = 5, double bias = 1.0,
                                     double alpha = 1.0, double beta = 0.5);
// x + b with b of shape [c] over x's last dim.
DTensor bias_add(const DTensor& x, const DTensor& b);
// [n, d1, d2, ...] -> [n, d1 * d2 * ...] (Keras Flatten; rank 1 gives [n, 1]).
DTensor flatten(const DTensor& x);
// With `training`, each element is kept with probability 1 - rate and scaled by 1 / (1 - rate),
// else zeroed; the mask is a function of (seed, global element position) only (runtime/random.h),
// so it is the same on every mesh and layout. Without `training` (or with rate 0), x itself.
// rate must be in [0, 1).
//
// The seed is a host value or a DTensor (the stateless-RNG way: TF's stateless_dropout seed
// tensor, a JAX key). A host seed is fixed when a captured step is traced, so inside a captured
// step (train/capture/function.h) the host-seed form throws UnimplementedError; give the seed as
// a DTensor instead: an i64 or i32 scalar, not partial, that is an argument of the step or comes
// from a SeedGenerator (ops/seed_generator.h). Its value is read when the mask is made, so every
// replay draws a fresh mask from the seed it then has, and dropout(x, rate, seed tensor holding s)
// gives the bits of dropout(x, rate, s). DTypeError or ShapeError name "dropout" for another seed.
//
//   SeedGenerator seeds(mesh, /*seed=*/1337);
//   Function step = function([&](const std::vector<DTensor>& a) {
//     DTensor h = dropout(relu(dense(a[0], w1, b1)), 0.5, seeds.next());  // fresh every step
//     ...
//   });
DTensor dropout(const DTensor& x, double rate, uint64_t seed, bool training = true);
DTensor dropout(const DTensor& x, double rate, const DTensor& seed, bool training = true);

}  // namespace dtensor
