// The machinery every op family file (ops/elementwise.cc, ops/matmul.cc, ...) shares: the
// expansion of one op (sharding decision, relayout, local kernels), recording an op with its VJP
// on the gradient tapes, and the shape, axis and partial-sum helpers several families use.
//
// Private to the :ops library (a header in its srcs): nothing outside ops/ includes it, and it
// holds no op of its own. Each op is written once, in its family file, in one shape:
//
//   namespace {
//   DTensor foo_forward(const DTensor& x, ...) {
//     ... validation (errors name "foo"), then
//     OpSignature sig{"foo", attributes, {operand letters}, output letters, linearity};
//     return expand(sig, {&x}, out_shape, out_dtype, work, [=](const Shards& s) {
//       return kernels::foo(s[0], ...);
//     });
//   }
//   }  // namespace
//
//   DTensor foo(const DTensor& x, ...) {
//     return recorded({&x}, [&] { return foo_forward(x, ...); }, [&](const DTensor& y) {
//       return [x, y](const DTensor& g) -> Grads { return {... g ...}; };  // the VJP
//     });
//   }
//
// VJPs are written with the public ops (ops/ops.h): the tape runs them with recording paused, so
// they record nothing and expand like any other op.
//
// Everything here is stateless and thread-safe; recording is per thread (ops/autograd.h).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/dtensor.h"
#include "ops/autograd.h"
#include "ops/expand.h"
#include "ops/sharding.h"

namespace dtensor {
namespace op_internal {

// ---- Expansion -------------------------------------------------------------------------------

// Decides the layouts for `sig` (all inputs on one mesh, else MeshError naming sig.op), relayouts
// the inputs that need it and runs `kernel` on every local shard (run_local). While a tape
// records, an output no VJP claims is left as a placeholder naming sig.op (note_untraced).
DTensor expand(const OpSignature& sig, const std::vector<const DTensor*>& inputs,
               const Shape& out_shape, DType out_dtype, double work, const LocalKernel& kernel,
               Stacking stacking = {});

// ---- Recording -------------------------------------------------------------------------------

using Grads = std::vector<std::optional<DTensor>>;

// Runs `forward` with recording paused: an op built from other ops records only itself.
template <typename Forward>
DTensor unrecorded(Forward&& forward) {
  NoRecord pause;
  return forward();
}

// A public op: y = forward() with recording paused; then, when a tape records and y is floating,
// y is recorded as computed from `inputs` with the VJP that make_vjp(y) returns. make_vjp runs
// only then, so the DTensors its closure copies cost nothing on the untraced path (and the input
// list is only copied into a vector then).
template <typename Forward, typename MakeVjp>
DTensor recorded(std::initializer_list<const DTensor*> inputs, Forward&& forward,
                 MakeVjp&& make_vjp) {
  DTensor y = unrecorded(std::forward<Forward>(forward));
  if (tape_active() && is_floating(y.dtype())) record_op(inputs, y, make_vjp(y));
  return y;
}

// As above, for ops with a variable number of inputs (concat).
template <typename Forward, typename MakeVjp>
DTensor recorded(const std::vector<const DTensor*>& inputs, Forward&& forward, MakeVjp&& make_vjp) {
  DTensor y = unrecorded(std::forward<Forward>(forward));
  if (tape_active() && is_floating(y.dtype())) record_op(inputs, y, make_vjp(y));
  return y;
}

// ---- Letters and shapes ----------------------------------------------------------------------

// Letters start, start + 1, ..., one per dim of a rank-n operand.
std::vector<int> iota_letters(int64_t n, int start = 0);

// Letters for an operand of `shape` broadcast to `out` (aligned at the right): its size-1 dims
// that broadcast get kBroadcastDim.
OperandDims broadcast_operand(const Shape& shape, const Shape& out, bool linear);

// DTypeError naming `op` unless a and b have one dtype.
void check_same_dtype(const char* op, const DTensor& a, const DTensor& b);

// ---- Axes ------------------------------------------------------------------------------------

// `axis` of `x` checked and made non-negative (runtime/shape.h's rule); errors name op and x.
int64_t checked_axis(const char* op, const DTensor& x, int64_t axis);
// `axes` of `x` checked, made non-negative and sorted (empty: all); errors name op and x.
std::vector<int64_t> checked_axes(const char* op, const DTensor& x, std::vector<int64_t> axes);

// The shape (or letters) of a reduction over sorted `axes`: reduced dims dropped, or kept as
// size-1 (kBroadcastDim) dims with `keepdims`.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdims);
std::vector<int> reduced_letters(int64_t rank, const std::vector<int64_t>& axes, bool keepdims);

// The signature attributes of an op over `axes`: "0,2" (",k" appended with keepdims).
std::string axes_attributes(const std::vector<int64_t>& axes, bool keepdims);

// ---- Partial sums ----------------------------------------------------------------------------

// Whether x holds partial sums (not max/min terms).
bool has_partial_sum(const DTensor& x);
// x with its partial terms reduced (x itself when it has none).
DTensor without_partial(const DTensor& x);
// `x` with the given tensor dims unsharded and no partial dims.
DTensor unshard_axes(const DTensor& x, const std::vector<int64_t>& axes);

// The operands of a product (mul, or div when `divide`: a / b) with a partial-sum operand such
// that passing the partial sum through gives the single-device result: the other operand made
// whole, and the partial one reduced first unless the other is an exact factor (finite, and
// non-zero for a divisor). Without partial-sum operands (the common case) nothing is checked or
// moved.
std::pair<DTensor, DTensor> exact_product_operands(const DTensor& a, const DTensor& b, bool divide);

// ---- VJP helpers (run while the tape replays, recording paused) ------------------------------

// Sums the broadcast dims of `g` away so it has `shape` (the adjoint of broadcasting).
DTensor sum_to(const DTensor& g, const Shape& shape);
// `value` in y's shape, dtype and layout (without its partial dims).
DTensor fill_like(const DTensor& y, double value);
// 1 where y > 0, else 0, in y's dtype (ReLU's derivative read from its output).
DTensor relu_mask(const DTensor& y);
// `g` (of the shape a reduction of x over sorted `axes` gave) broadcast back to x's shape.
DTensor unreduce(const DTensor& g, const DTensor& x, const std::vector<int64_t>& axes,
                 bool keepdims);

}  // namespace op_internal
}  // namespace dtensor
