#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/autograd.h"
#include "ops/expand.h"
#include "ops/kernels/kernels.h"
#include "ops/sharding.h"
#include "runtime/collectives.h"

namespace dtensor {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

std::vector<int> iota_letters(int64_t n, int start = 0) {
  std::vector<int> letters(static_cast<size_t>(n));
  std::iota(letters.begin(), letters.end(), start);
  return letters;
}

// Axis arguments are checked by runtime/shape.h (one rule for every op); errors name `x`.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op, const DTensor& x) {
  return dtensor::normalize_axis(axis, rank, op, [&x] { return x.short_string(); });
}

// Decides the layouts, relayouts the inputs and runs `kernel` on every shard.
DTensor expand(const OpSignature& sig, const std::vector<const DTensor*>& inputs,
               const Shape& out_shape, DType out_dtype, double work, const LocalKernel& kernel,
               Stacking stacking = {}) {
  check_same_mesh(sig.op.c_str(), inputs);
  auto decision = decide_sharding(sig, inputs);
  // Only inputs whose layout changes are copied.
  std::vector<DTensor> moved;
  moved.reserve(inputs.size());
  std::vector<const DTensor*> ready(inputs.begin(), inputs.end());
  {
    NoRecord pause;  // moving the inputs is part of this op, not a recorded relayout of its own
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i]->layout() == decision->inputs[i]) continue;
      moved.push_back(relayout(*inputs[i], decision->inputs[i]));
      ready[i] = &moved.back();
    }
  }
  DTensor y = run_local(ready, decision->output, out_shape, out_dtype, work, kernel, stacking);
  note_untraced(sig.op, inputs, y);  // an op with a VJP records y (or runs paused)
  return y;
}

DTensor unary_op(const char* name, UnaryOp op, const DTensor& x, bool linear = false) {
  OpSignature sig{name,
                  {{iota_letters(x.rank()), linear}},
                  iota_letters(x.rank()),
                  linear ? Linearity::kMultilinear : Linearity::kNone};
  return expand(sig, {&x}, x.shape(), x.dtype(), static_cast<double>(x.num_elements()),
                [op](const Shards& s) { return kernels::unary(op, s[0]); });
}

// Letters for an operand of `shape` broadcast to `out` (aligned at the right).
OperandDims broadcast_operand(const Shape& shape, const Shape& out, bool linear) {
  OperandDims dims{{}, linear};
  const size_t offset = out.size() - shape.size();
  for (size_t j = 0; j < shape.size(); ++j) {
    bool broadcast = shape[j] == 1 && out[offset + j] != 1;
    dims.letters.push_back(broadcast ? kBroadcastDim : static_cast<int>(offset + j));
  }
  return dims;
}

void check_same_dtype(const char* op, const DTensor& a, const DTensor& b) {
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(op, "dtypes differ: {} and {}", a.short_string(), b.short_string());
  }
}

Shape broadcast_shapes(const char* op, const Shape& x, const Shape& y, const DTensor& a,
                       const DTensor& b) {
  Shape out(std::max(x.size(), y.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t dx = i < out.size() - x.size() ? 1 : x[i - (out.size() - x.size())];
    int64_t dy = i < out.size() - y.size() ? 1 : y[i - (out.size() - y.size())];
    if (dx != dy && dx != 1 && dy != 1) {
      throw_error<ShapeError>(op, "shapes do not broadcast: {} and {}", a.short_string(),
                              b.short_string());
    }
    out[i] = dx == 1 ? dy : dx;
  }
  return out;
}

Shape broadcast_shape(const char* op, const DTensor& a, const DTensor& b) {
  return broadcast_shapes(op, a.shape(), b.shape(), a, b);
}

DTensor binary_op(const char* name, BinaryOp op, const DTensor& a, const DTensor& b,
                  Linearity linearity = Linearity::kNone, bool a_linear = false,
                  bool b_linear = false) {
  check_same_mesh(name, {&a, &b});
  check_same_dtype(name, a, b);
  Shape out = broadcast_shape(name, a, b);
  OpSignature sig{
      name,
      {broadcast_operand(a.shape(), out, a_linear), broadcast_operand(b.shape(), out, b_linear)},
      iota_letters(static_cast<int64_t>(out.size())),
      linearity};
  const bool comparison = op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual;
  return expand(sig, {&a, &b}, out, comparison ? DType::kBool : a.dtype(),
                static_cast<double>(num_elements(out)),
                [op](const Shards& s) { return kernels::binary(op, s[0], s[1]); });
}

std::vector<int64_t> normalize_axes(std::vector<int64_t> axes, const DTensor& x, const char* op) {
  return dtensor::normalize_axes(std::move(axes), x.rank(), op, [&x] { return x.short_string(); });
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdims) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      out.push_back(shape[d]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

std::vector<int> reduced_letters(int64_t rank, const std::vector<int64_t>& axes, bool keepdims) {
  std::vector<int> letters;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      letters.push_back(static_cast<int>(d));
    else if (keepdims)
      letters.push_back(kBroadcastDim);
  }
  return letters;
}

std::string axes_key(const char* op, const std::vector<int64_t>& axes, bool keepdims) {
  std::string key = op;
  for (int64_t a : axes) key += "," + std::to_string(a);
  return key + (keepdims ? ",k" : "");
}

// `x` with the given tensor dims unsharded and no partial dims.
DTensor unshard_axes(const DTensor& x, const std::vector<int64_t>& axes) {
  Layout l = x.layout().without_partial();
  for (int64_t a : axes) l = l.with_spec(a, Layout::kUnsharded);
  return relayout(x, l);
}

DTensor reduce_op(const char* name, kernels::ReduceKind kind, const DTensor& x,
                  std::vector<int64_t> axes, bool keepdims) {
  axes = normalize_axes(std::move(axes), x, name);
  const bool is_mean = kind == kernels::ReduceKind::kMean;
  const bool sum_like = kind == kernels::ReduceKind::kSum || is_mean;
  // Integer means truncate, so they cannot be split into partial terms: reduce whole axes.
  const DTensor in = is_mean && !is_floating(x.dtype()) ? unshard_axes(x, axes) : x;
  OpSignature sig{axes_key(name, axes, keepdims),
                  {{iota_letters(x.rank()), sum_like}},
                  reduced_letters(x.rank(), axes, keepdims),
                  sum_like ? Linearity::kMultilinear : Linearity::kNone,
                  kind == kernels::ReduceKind::kMax   ? ReduceOp::kMax
                  : kind == kernels::ReduceKind::kMin ? ReduceOp::kMin
                                                      : ReduceOp::kSum};
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(x.shape()[a]);
  const bool float_mean = is_mean && is_floating(x.dtype());
  return expand(sig, {&in}, reduced_shape(x.shape(), axes, keepdims), x.dtype(),
                static_cast<double>(x.num_elements()), [=](const Shards& s) {
                  if (float_mean) {
                    // Sum locally, divide by the global count: exact for partial and uneven shards.
                    return kernels::scale(
                        kernels::reduce(kernels::ReduceKind::kSum, s[0], axes, keepdims),
                        1.0 / count);
                  }
                  return kernels::reduce(kind, s[0], axes, keepdims);
                });
}

}  // namespace

DTensor fwd_neg(const DTensor& x) { return unary_op("neg", UnaryOp::kNeg, x, /*linear=*/true); }
DTensor fwd_abs(const DTensor& x) { return unary_op("abs", UnaryOp::kAbs, x); }
DTensor fwd_exp(const DTensor& x) { return unary_op("exp", UnaryOp::kExp, x); }
DTensor fwd_log(const DTensor& x) { return unary_op("log", UnaryOp::kLog, x); }
DTensor fwd_sqrt(const DTensor& x) { return unary_op("sqrt", UnaryOp::kSqrt, x); }
DTensor fwd_rsqrt(const DTensor& x) { return unary_op("rsqrt", UnaryOp::kRsqrt, x); }
DTensor fwd_square(const DTensor& x) { return unary_op("square", UnaryOp::kSquare, x); }
DTensor fwd_relu(const DTensor& x) { return unary_op("relu", UnaryOp::kRelu, x); }
DTensor fwd_sigmoid(const DTensor& x) { return unary_op("sigmoid", UnaryOp::kSigmoid, x); }
DTensor fwd_tanh(const DTensor& x) { return unary_op("tanh", UnaryOp::kTanh, x); }
DTensor fwd_gelu(const DTensor& x) { return unary_op("gelu", UnaryOp::kGelu, x); }

DTensor fwd_scale(const DTensor& x, double alpha) {
  OpSignature sig{
      "scale", {{iota_letters(x.rank()), true}}, iota_letters(x.rank()), Linearity::kMultilinear};
  // A non-finite factor times a partial sum's zero terms gives NaN where one device gives ±inf:
  // only a finite factor may pass the partial sum through.
  const DTensor in = std::isfinite(alpha) || !x.layout().is_partial()
                         ? x
                         : relayout(x, x.layout().without_partial());
  return expand(sig, {&in}, x.shape(), x.dtype(), static_cast<double>(x.num_elements()),
                [alpha](const Shards& s) { return kernels::scale(s[0], alpha); });
}

DTensor fwd_add(const DTensor& a, const DTensor& b) {
  return binary_op("add", BinaryOp::kAdd, a, b, Linearity::kAdditive);
}
DTensor fwd_sub(const DTensor& a, const DTensor& b) {
  return binary_op("sub", BinaryOp::kSub, a, b, Linearity::kAdditive);
}
namespace {

bool has_partial_sum(const DTensor& x) {
  return x.layout().is_partial() && x.layout().partial()[0].op == ReduceOp::kSum;
}

DTensor without_partial(const DTensor& x) {
  return x.layout().is_partial() ? relayout(x, x.layout().without_partial()) : x;
}

// Whether the n floating values at `data` (Bits: their unsigned bit pattern) are all finite, and
// non-zero when `nonzero`. Bit tests with an integer OR, so the loop vectorizes and runs at memory
// speed: an all-ones exponent is inf or NaN, no bits but the sign is zero.
template <typename Bits, Bits kExponent, Bits kMagnitude>
bool finite_values(const void* data, int64_t n, bool nonzero) {
  const char* bytes = static_cast<const char*>(data);
  const Bits check_zero = nonzero ? 1 : 0;
  auto is_bad = [&](int64_t i) {
    Bits v;
    std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    const Bits non_finite = (v & kExponent) == kExponent;
    const Bits zero = (v & kMagnitude) == 0;
    return static_cast<Bits>(non_finite | (zero & check_zero));
  };
  // Fixed-width blocks of independent lanes: what the compiler turns into vector code at -O2.
  constexpr int64_t kLanes = 16;
  Bits lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = static_cast<Bits>(lanes[j] | is_bad(i + j));
  }
  Bits bad = 0;
  for (; i < n; ++i) bad = static_cast<Bits>(bad | is_bad(i));
  for (Bits lane : lanes) bad = static_cast<Bits>(bad | lane);
  return bad == 0;
}

// Whether a partial sum may pass through a product with `factor` (a non-partial operand):
// each device then multiplies (or divides) its own term, which is exact only when every factor
// is finite: inf times a zero term is NaN where the single-device product is inf. A divisor must
// also be non-zero (x / 0 of a zero term is NaN), and integer division truncates each term, so
// it never is. Processes agree through one tiny all-reduce, since the output layout must be the
// same everywhere.
bool exact_factor(const DTensor& factor, bool divisor) {
  if (!is_floating(factor.dtype())) return !divisor;
  bool ok = true;
  std::unordered_set<const void*> seen;  // replicated shards may share one buffer
  for (const Tensor& t : factor.shards()) {
    if (!ok || !seen.insert(t.raw_data()).second) continue;
    const int64_t n = t.num_elements();
    if (t.dtype() == DType::kF64) {
      ok = finite_values<uint64_t, 0x7ff0000000000000u, 0x7fffffffffffffffu>(t.raw_data(), n,
                                                                             divisor);
    } else if (t.dtype() == DType::kF32) {
      ok = finite_values<uint32_t, 0x7f800000u, 0x7fffffffu>(t.raw_data(), n, divisor);
    } else {
      ok = finite_values<uint16_t, 0x7f80u, 0x7fffu>(t.raw_data(), n, divisor);
    }
  }
  const Mesh& mesh = factor.mesh();
  if (mesh.num_processes() == 1) return ok;
  std::vector<Tensor> flags;
  for (int64_t id : mesh.local_device_ids()) {
    Tensor flag = Tensor::empty({}, DType::kBool).with_device(mesh_device(mesh, id));
    *flag.data<bool>() = !ok;
    flags.push_back(std::move(flag));
  }
  const MeshDimMask every_dim = static_cast<MeshDimMask>((MeshDimMask{1} << mesh.rank()) - 1);
  return !*all_reduce(mesh, every_dim, flags, ReduceOp::kMax)[0].data<bool>();
}

// The operands of a product (mul, or div when `divide`: a / b) with a partial-sum operand such
// that passing the partial through gives the single-device result: the other operand made whole,
// and the partial one reduced first unless the other is an exact factor. Without partial-sum
// operands (the common case) nothing is checked or moved.
std::pair<DTensor, DTensor> exact_product_operands(const DTensor& a, const DTensor& b,
                                                   bool divide) {
  const bool term_is_a = has_partial_sum(a);
  if (!term_is_a && (divide || !has_partial_sum(b))) return {a, b};
  const DTensor& term = term_is_a ? a : b;
  DTensor factor = without_partial(term_is_a ? b : a);
  DTensor kept = exact_factor(factor, divide) ? term : without_partial(term);
  return term_is_a ? std::make_pair(kept, factor) : std::make_pair(factor, kept);
}

}  // namespace

DTensor fwd_mul(const DTensor& a, const DTensor& b) {
  auto [x, y] = exact_product_operands(a, b, /*divide=*/false);
  return binary_op("mul", BinaryOp::kMul, x, y, Linearity::kMultilinear, true, true);
}
DTensor fwd_div(const DTensor& a, const DTensor& b) {
  auto [x, y] = exact_product_operands(a, b, /*divide=*/true);
  return binary_op("div", BinaryOp::kDiv, x, y, Linearity::kMultilinear, true, false);
}
DTensor fwd_pow(const DTensor& a, const DTensor& b) {
  return binary_op("pow", BinaryOp::kPow, a, b);
}
DTensor fwd_maximum(const DTensor& a, const DTensor& b) {
  return binary_op("maximum", BinaryOp::kMaximum, a, b);
}
DTensor fwd_minimum(const DTensor& a, const DTensor& b) {
  return binary_op("minimum", BinaryOp::kMinimum, a, b);
}
DTensor equal(const DTensor& a, const DTensor& b) {
  return binary_op("equal", BinaryOp::kEqual, a, b);
}
DTensor not_equal(const DTensor& a, const DTensor& b) {
  return binary_op("not_equal", BinaryOp::kNotEqual, a, b);
}
DTensor less(const DTensor& a, const DTensor& b) {
  return binary_op("less", BinaryOp::kLess, a, b);
}
DTensor less_equal(const DTensor& a, const DTensor& b) {
  return binary_op("less_equal", BinaryOp::kLessEqual, a, b);
}
DTensor greater(const DTensor& a, const DTensor& b) {
  return binary_op("greater", BinaryOp::kGreater, a, b);
}
DTensor greater_equal(const DTensor& a, const DTensor& b) {
  return binary_op("greater_equal", BinaryOp::kGreaterEqual, a, b);
}

DTensor fwd_where(const DTensor& cond, const DTensor& a, const DTensor& b) {
  check_same_mesh("where", {&cond, &a, &b});
  check_same_dtype("where", a, b);
  if (cond.dtype() != DType::kBool) {
    throw_error<DTypeError>("where", "condition {} must be bool", cond.short_string());
  }
  Shape out = broadcast_shape("where", a, b);
  // The condition against each value on its own, so that an error names the operand it
  // disagrees with; pairwise agreement means the three broadcast together.
  broadcast_shapes("where", cond.shape(), a.shape(), cond, a);
  broadcast_shapes("where", cond.shape(), b.shape(), cond, b);
  out = broadcast_shapes("where", cond.shape(), out, cond, a);
  OpSignature sig{
      "where",
      {broadcast_operand(cond.shape(), out, false), broadcast_operand(a.shape(), out, false),
       broadcast_operand(b.shape(), out, false)},
      iota_letters(static_cast<int64_t>(out.size()))};
  return expand(sig, {&cond, &a, &b}, out, a.dtype(), static_cast<double>(num_elements(out)),
                [](const Shards& s) { return kernels::where(s[0], s[1], s[2]); });
}

DTensor fwd_cast(const DTensor& x, DType dtype) {
  if (dtype == x.dtype()) return x;
  OpSignature sig{std::string("cast:") + std::string(dtype_name(dtype)),
                  {{iota_letters(x.rank()), false}},
                  iota_letters(x.rank())};
  return expand(sig, {&x}, x.shape(), dtype, static_cast<double>(x.num_elements()),
                [dtype](const Shards& s) { return kernels::cast(s[0], dtype); });
}

DTensor fwd_matmul(const DTensor& a, const DTensor& b, bool transpose_a, bool transpose_b) {
  check_same_mesh("matmul", {&a, &b});
  check_same_dtype("matmul", a, b);
  if (a.rank() < 2 || b.rank() < 2) {
    throw_error<ShapeError>("matmul", "operands need rank >= 2: {} x {}", a.short_string(),
                            b.short_string());
  }
  const int64_t ra = a.rank(), rb = b.rank();
  const int64_t m = a.shape()[ra - (transpose_a ? 1 : 2)];
  const int64_t ka = a.shape()[ra - (transpose_a ? 2 : 1)];
  const int64_t kb = b.shape()[rb - (transpose_b ? 1 : 2)];
  const int64_t n = b.shape()[rb - (transpose_b ? 2 : 1)];
  if (ka != kb) {
    throw_error<ShapeError>("matmul", "contraction dims differ ({} vs {}): {}{} x {}{}", ka, kb,
                            a.short_string(), transpose_a ? "^T" : "", b.short_string(),
                            transpose_b ? "^T" : "");
  }
  // Batch dims broadcast like elementwise dims.
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch(std::max(batch_a.size(), batch_b.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t da =
        i < batch.size() - batch_a.size() ? 1 : batch_a[i - (batch.size() - batch_a.size())];
    int64_t db =
        i < batch.size() - batch_b.size() ? 1 : batch_b[i - (batch.size() - batch_b.size())];
    if (da != db && da != 1 && db != 1) {
      throw_error<ShapeError>("matmul", "batch dims do not broadcast: {} x {}", a.short_string(),
                              b.short_string());
    }
    batch[i] = da == 1 ? db : da;
  }
  const int nb = static_cast<int>(batch.size());
  const int lm = nb, ln = nb + 1, lk = nb + 2;
  OperandDims da = broadcast_operand(batch_a, batch, true);
  OperandDims db = broadcast_operand(batch_b, batch, true);
  if (transpose_a)
    da.letters.insert(da.letters.end(), {lk, lm});
  else
    da.letters.insert(da.letters.end(), {lm, lk});
  if (transpose_b)
    db.letters.insert(db.letters.end(), {ln, lk});
  else
    db.letters.insert(db.letters.end(), {lk, ln});
  std::vector<int> out_letters = iota_letters(nb);
  out_letters.push_back(lm);
  out_letters.push_back(ln);
  Shape out = batch;
  out.push_back(m);
  out.push_back(n);
  OpSignature sig{std::string("matmul") + (transpose_a ? "T" : "N") + (transpose_b ? "T" : "N"),
                  {da, db},
                  out_letters,
                  Linearity::kMultilinear};
  const double flops = 2.0 * static_cast<double>(num_elements(batch)) * m * n * ka;
  // A plain [m,k] left operand is row-separable: devices sharing b run as one call. The devices
  // of a partial group (K sharded) run as one call on their K slices put together.
  Stacking stacking;
  if (a.rank() == 2 && b.rank() == 2) {
    stacking.rows_of = transpose_a ? -1 : 0;
    stacking.contraction_axes = {transpose_a ? 0 : 1, transpose_b ? 1 : 0};
  }
  return expand(
      sig, {&a, &b}, out, a.dtype(), flops,
      [=](const Shards& s) {
        return kernels::matmul(s[0], s[1], {transpose_a, transpose_b, local_blas_threads()});
      },
      stacking);
}

DTensor fwd_reduce_sum(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  return reduce_op("reduce_sum", kernels::ReduceKind::kSum, x, std::move(axes), keepdims);
}
DTensor fwd_reduce_mean(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  return reduce_op("reduce_mean", kernels::ReduceKind::kMean, x, std::move(axes), keepdims);
}
DTensor fwd_reduce_max(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  return reduce_op("reduce_max", kernels::ReduceKind::kMax, x, std::move(axes), keepdims);
}
DTensor fwd_reduce_min(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  return reduce_op("reduce_min", kernels::ReduceKind::kMin, x, std::move(axes), keepdims);
}

DTensor argmax(const DTensor& x, int64_t axis, bool keepdims) {
  axis = normalize_axis(axis, x.rank(), "argmax", x);
  // The winning index is global, so the axis is brought whole onto each device.
  DTensor in = unshard_axes(x, {axis});
  OpSignature sig{axes_key("argmax", {axis}, keepdims),
                  {{iota_letters(x.rank()), false}},
                  reduced_letters(x.rank(), {axis}, keepdims)};
  return expand(sig, {&in}, reduced_shape(x.shape(), {axis}, keepdims), DType::kI64,
                static_cast<double>(x.num_elements()),
                [=](const Shards& s) { return kernels::argmax(s[0], axis, keepdims); });
}

namespace {

// Local softmax-family kernel along an unsharded axis.
DTensor along_axis(const char* name, const DTensor& x, int64_t axis, bool keepdims_out,
                   bool drops_axis, Tensor (*kernel)(const Tensor&, int64_t, bool)) {
  OpSignature sig{
      axes_key(name, {axis}, keepdims_out),
      {{iota_letters(x.rank()), false}},
      drops_axis ? reduced_letters(x.rank(), {axis}, keepdims_out) : iota_letters(x.rank())};
  Shape out = drops_axis ? reduced_shape(x.shape(), {axis}, keepdims_out) : x.shape();
  return expand(sig, {&x}, out, x.dtype(), 4.0 * static_cast<double>(x.num_elements()),
                [=](const Shards& s) { return kernel(s[0], axis, keepdims_out); });
}

Tensor softmax_kernel(const Tensor& x, int64_t axis, bool) { return kernels::softmax(x, axis); }
Tensor log_softmax_kernel(const Tensor& x, int64_t axis, bool) {
  return kernels::log_softmax(x, axis);
}
Tensor logsumexp_kernel(const Tensor& x, int64_t axis, bool keepdims) {
  return kernels::logsumexp(x, axis, keepdims);
}

bool axis_sharded(const DTensor& x, int64_t axis) { return x.layout().is_sharded(axis); }

// The softmax family over a sharded axis, from the pieces the kernels use (kernels::softmax):
// x without partial terms, shift = softmax_shift(global max), the exps of x - shift and their
// global sum. Two small all-reduces ([..., 1] each) instead of gathering the axis, and the same
// non-finite results as one device: the shift rule keeps x - shift from being inf - inf.
struct SoftmaxPieces {
  DTensor x, shift, shifted, exps, sum;  // shifted = x - shift; shift and sum keep the axis
};

SoftmaxPieces softmax_pieces(const DTensor& x_in, int64_t axis) {
  const DTensor x = without_partial(x_in);  // reduced once here rather than in each consumer
  DTensor max = reduce_max(x, {axis}, true);
  max = relayout(max, max.layout().without_partial());
  OpSignature sig{"softmax_shift", {{iota_letters(max.rank()), false}}, iota_letters(max.rank())};
  DTensor shift =
      expand(sig, {&max}, max.shape(), max.dtype(), static_cast<double>(max.num_elements()),
             [](const Shards& s) { return kernels::softmax_shift(s[0]); });
  DTensor shifted = sub(x, shift);
  DTensor exps = exp(shifted);
  DTensor sum = reduce_sum(exps, {axis}, true);
  sum = relayout(sum, sum.layout().without_partial());
  return {x, shift, shifted, exps, sum};
}

// Labels outside [0, classes) throw the kernel's error, naming the label's global position, on
// every layout: the class-sharded expansion never runs the kernel's check, and the kernel would
// name a position within its shard.
void check_labels_in_range(const DTensor& labels, int64_t classes) {
  const Mesh& mesh = labels.mesh();
  const Layout plain = labels.layout().without_partial();
  const DTensor whole = without_partial(labels);
  int64_t worst = -1, value = 0;  // the first bad label in global order, and its value
  for (size_t i = 0; i < whole.shards().size(); ++i) {
    const Tensor& shard = whole.shards()[i];
    const int64_t device = mesh.local_device_ids()[i];
    const std::vector<int64_t> offset = plain.shard_offset(labels.shape(), device);
    for (int64_t e = 0; e < shard.num_elements(); ++e) {
      const int64_t label =
          shard.dtype() == DType::kI32 ? shard.data<int32_t>()[e] : shard.data<int64_t>()[e];
      if (label >= 0 && label < classes) continue;
      int64_t flat = 0, rest = e;  // the global flat position of local element e
      std::vector<int64_t> local(shard.shape().size());
      for (size_t d = local.size(); d-- > 0;) {
        local[d] = rest % shard.shape()[d];
        rest /= shard.shape()[d];
      }
      for (size_t d = 0; d < local.size(); ++d) {
        flat = flat * labels.shape()[d] + offset[d] + local[d];
      }
      if (worst < 0 || flat < worst) {
        worst = flat;
        value = label;
      }
    }
  }
  if (worst < 0) return;
  std::vector<int64_t> position(labels.shape().size());
  for (size_t d = position.size(); d-- > 0;) {
    position[d] = worst % labels.shape()[d];
    worst /= labels.shape()[d];
  }
  throw_error<InvalidArgumentError>("sparse_softmax_cross_entropy",
                                    "label {} at position {} is outside [0, {})", value,
                                    shape_to_string(position), classes);
}

}  // namespace

DTensor fwd_softmax(const DTensor& x, int64_t axis) {
  axis = normalize_axis(axis, x.rank(), "softmax", x);
  if (!axis_sharded(x, axis)) return along_axis("softmax", x, axis, false, false, softmax_kernel);
  SoftmaxPieces p = softmax_pieces(x, axis);
  return div(p.exps, p.sum);
}

DTensor fwd_log_softmax(const DTensor& x, int64_t axis) {
  axis = normalize_axis(axis, x.rank(), "log_softmax", x);
  if (!axis_sharded(x, axis)) {
    return along_axis("log_softmax", x, axis, false, false, log_softmax_kernel);
  }
  SoftmaxPieces p = softmax_pieces(x, axis);
  return sub(p.shifted, log(p.sum));
}

DTensor fwd_logsumexp(const DTensor& x, int64_t axis, bool keepdims) {
  axis = normalize_axis(axis, x.rank(), "logsumexp", x);
  if (!axis_sharded(x, axis)) {
    return along_axis("logsumexp", x, axis, keepdims, true, logsumexp_kernel);
  }
  SoftmaxPieces p = softmax_pieces(x, axis);
  DTensor lse = add(p.shift, log(p.sum));
  return keepdims ? lse : reshape(lse, reduced_shape(x.shape(), {axis}, false));
}

DTensor fwd_sparse_softmax_cross_entropy(const DTensor& logits, const DTensor& labels) {
  check_same_mesh("sparse_softmax_cross_entropy", {&logits, &labels});
  if (logits.rank() < 1 ||
      labels.shape() != Shape(logits.shape().begin(), logits.shape().end() - 1)) {
    throw_error<ShapeError>("sparse_softmax_cross_entropy",
                            "labels {} must have the shape of logits {} without the class dim",
                            labels.short_string(), logits.short_string());
  }
  if (labels.dtype() != DType::kI32 && labels.dtype() != DType::kI64) {
    throw_error<DTypeError>("sparse_softmax_cross_entropy", "labels {} must be i32 or i64",
                            labels.short_string());
  }
  const int64_t axis = logits.rank() - 1;
  check_labels_in_range(labels, logits.shape()[axis]);
  if (axis_sharded(logits, axis)) {
    // Class dim sharded: log(sum) - (x[label] - shift), the kernel's form. The label logit is
    // taken relative to the shift (exact for large logits, where lse - x[label] would cancel),
    // and selected rather than multiplied by a one-hot (0 * -inf would be NaN).
    SoftmaxPieces p = softmax_pieces(logits, axis);
    DTensor mask = one_hot(labels, logits.shape()[axis], DType::kBool);
    DTensor zero = fill({}, Layout::replicated(logits.mesh(), 0), 0.0, logits.dtype());
    DTensor picked = reduce_sum(where(mask, p.shifted, zero), {axis}, false);
    return sub(log(reshape(p.sum, labels.shape())), picked);
  }
  std::vector<int> label_letters = iota_letters(logits.rank() - 1);
  OpSignature sig{"sparse_softmax_cross_entropy",
                  {{iota_letters(logits.rank()), false}, {label_letters, false}},
                  label_letters};
  return expand(sig, {&logits, &labels}, labels.shape(), logits.dtype(),
                4.0 * static_cast<double>(logits.num_elements()),
                [](const Shards& s) { return kernels::sparse_softmax_cross_entropy(s[0], s[1]); });
}

DTensor one_hot(const DTensor& indices, int64_t depth, DType dtype) {
  if (indices.dtype() != DType::kI32 && indices.dtype() != DType::kI64) {
    throw_error<DTypeError>("one_hot", "indices {} must be i32 or i64", indices.short_string());
  }
  if (depth < 0) throw_error<InvalidArgumentError>("one_hot", "negative depth {}", depth);
  std::vector<int> out_letters = iota_letters(indices.rank());
  out_letters.push_back(kBroadcastDim);
  Shape out = indices.shape();
  out.push_back(depth);
  validate_shape(out, "one_hot");  // a huge depth must not overflow the element count
  OpSignature sig{"one_hot:" + std::to_string(depth) + std::string(dtype_name(dtype)),
                  {{iota_letters(indices.rank()), false}},
                  out_letters};
  return expand(sig, {&indices}, out, dtype, static_cast<double>(num_elements(out)),
                [=](const Shards& s) { return kernels::one_hot(s[0], depth, dtype); });
}

DTensor fwd_reshape(const DTensor& x, const Shape& shape) {
  Shape target = shape;
  int64_t known = 1, infer = -1;
  bool valid = true;  // dims >= -1, at most one -1, a product that does not overflow
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1 && infer < 0)
      infer = static_cast<int64_t>(i);
    else
      valid = valid && target[i] >= 0 && checked_mul(known, target[i], &known);
  }
  if (valid && infer >= 0 && known > 0) target[infer] = x.num_elements() / known;
  if (!valid || num_elements(target) != x.num_elements() ||
      std::any_of(target.begin(), target.end(), [](int64_t d) { return d < 0; })) {
    throw_error<ShapeError>("reshape", "cannot reshape {} to {}", x.short_string(),
                            shape_to_string(shape));
  }
  // A sharded dim keeps its sharding when every dim up to it is unchanged; others are gathered.
  Layout in_layout = x.layout();
  std::vector<std::string> out_specs(target.size(), Layout::kUnsharded);
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (!in_layout.is_sharded(d)) continue;
    bool prefix_same = d < static_cast<int64_t>(target.size());
    for (int64_t e = 0; prefix_same && e <= d; ++e) prefix_same = x.shape()[e] == target[e];
    if (prefix_same)
      out_specs[d] = in_layout.spec(d);
    else
      in_layout = in_layout.with_spec(d, Layout::kUnsharded);
  }
  DTensor in = relayout(x, in_layout);
  Layout out_layout(out_specs, x.mesh(), in_layout.partial());
  std::vector<Tensor> shards;
  for (size_t i = 0; i < in.shards().size(); ++i) {
    shards.push_back(in.shard(static_cast<int64_t>(i))
                         .reshaped(out_layout.shard_shape(target, x.mesh().local_device_ids()[i])));
  }
  return DTensor::from_trusted_shards(target, x.dtype(), out_layout, std::move(shards));
}

DTensor fwd_transpose(const DTensor& x, std::vector<int64_t> perm) {
  if (perm.empty()) {
    for (int64_t d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
  }
  check_permutation(perm, x.rank(), "transpose", [&x] { return x.short_string(); });
  std::vector<int> in_letters = iota_letters(x.rank());
  std::vector<int> out_letters;
  Shape out;
  std::string key = "transpose";
  for (int64_t p : perm) {
    out_letters.push_back(static_cast<int>(p));
    out.push_back(x.shape()[p]);
    key += "," + std::to_string(p);
  }
  OpSignature sig{key, {{in_letters, true}}, out_letters, Linearity::kMultilinear};
  return expand(sig, {&x}, out, x.dtype(), static_cast<double>(x.num_elements()),
                [perm](const Shards& s) { return kernels::transpose(s[0], perm); });
}

// ---------------------------------------------------------------------------------------------
// Public ops: the forward expansion, recorded with its vector-Jacobian product when a tape is
// active. VJPs are DTensor ops, so gradients are sharded like everything else. Forward passes
// run with recording paused, so composite ops record only themselves.

namespace {

using Grads = std::vector<std::optional<DTensor>>;

template <typename Fn>
DTensor unrecorded(Fn&& forward) {
  NoRecord pause;
  return forward();
}

// Records `y = op(inputs)` with `vjp` when a tape is active and the output is differentiable.
// `make_vjp` builds the VJP closure (which copies what it needs) only when recording.
template <typename MakeVjp>
DTensor traced(std::initializer_list<const DTensor*> inputs, DTensor y, MakeVjp&& make_vjp) {
  if (tape_active() && is_floating(y.dtype())) record_op(inputs, y, make_vjp());
  return y;
}

// Sums the broadcast dims of `g` away so it has `shape` (the adjoint of broadcasting).
DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.rank() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.rank(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  }
  DTensor summed = axes.empty() ? g : fwd_reduce_sum(g, axes, true);
  return fwd_reshape(summed, shape);
}

DTensor fill_like(const DTensor& y, double value) {
  return fill(y.shape(), y.layout().without_partial(), value, y.dtype());
}

DTensor gelu_derivative(const DTensor& x) {
  // d/dx of 0.5 x (1 + tanh(c (x + 0.044715 x^3))).
  const double c = 0.7978845608028654;
  DTensor x2 = fwd_square(x);
  DTensor u = fwd_scale(fwd_mul(x, fwd_add(fill_like(x, 1.0), fwd_scale(x2, 0.044715))), c);
  DTensor t = fwd_tanh(u);
  DTensor one = fill_like(x, 1.0);
  DTensor left = fwd_scale(fwd_add(one, t), 0.5);
  DTensor du = fwd_scale(fwd_add(one, fwd_scale(x2, 3 * 0.044715)), c);
  DTensor right = fwd_mul(fwd_scale(x, 0.5), fwd_mul(fwd_sub(one, fwd_square(t)), du));
  return fwd_add(left, right);
}

}  // namespace

DTensor broadcast_to(const DTensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  validate_shape(shape, "broadcast_to");
  if (shape.size() < x.shape().size()) {
    throw_error<ShapeError>("broadcast_to", "cannot broadcast {} to {}", x.short_string(),
                            shape_to_string(shape));
  }
  OperandDims dims = broadcast_operand(x.shape(), shape, true);
  for (size_t j = 0; j < x.shape().size(); ++j) {
    if (dims.letters[j] >= 0 && x.shape()[j] != shape[dims.letters[j]]) {
      throw_error<ShapeError>("broadcast_to", "cannot broadcast {} to {}", x.short_string(),
                              shape_to_string(shape));
    }
  }
  std::string key = "broadcast_to";
  for (int64_t d : shape) key += "," + std::to_string(d);
  OpSignature sig{
      key, {dims}, iota_letters(static_cast<int64_t>(shape.size())), Linearity::kMultilinear};
  DTensor y = expand(sig, {&x}, shape, x.dtype(), static_cast<double>(num_elements(shape)),
                     [dims, shape](const Shards& s) {
                       // Dims that come from x keep x's local extent (it may be sharded).
                       Shape local = shape;
                       for (size_t j = 0; j < dims.letters.size(); ++j) {
                         if (dims.letters[j] >= 0) {
                           local[dims.letters[j]] = s[0].dim(static_cast<int64_t>(j));
                         }
                       }
                       return kernels::broadcast_to(s[0], local);
                     });
  const Shape from = x.shape();
  return traced({&x}, y,
                [&] { return [from](const DTensor& g) -> Grads { return {sum_to(g, from)}; }; });
}

#define DTENSOR_UNARY(name, grad)                                                                 \
  DTensor name(const DTensor& x) {                                                                \
    DTensor y = unrecorded([&] { return fwd_##name(x); });                                        \
    return traced({&x}, y, [&] { return [x, y](const DTensor& g) -> Grads { return {grad}; }; }); \
  }

DTENSOR_UNARY(neg, fwd_neg(g))
DTENSOR_UNARY(abs, fwd_mul(g, unary_op("sign", UnaryOp::kSign, x)))
DTENSOR_UNARY(exp, fwd_mul(g, y))
DTENSOR_UNARY(log, fwd_div(g, x))
DTENSOR_UNARY(sqrt, fwd_div(fwd_scale(g, 0.5), y))
DTENSOR_UNARY(rsqrt, fwd_mul(g, fwd_scale(fwd_mul(y, fwd_mul(y, y)), -0.5)))
DTENSOR_UNARY(square, fwd_mul(g, fwd_scale(x, 2.0)))
DTENSOR_UNARY(relu, fwd_mul(g, unary_op("relu_grad", UnaryOp::kReluGrad, x)))
DTENSOR_UNARY(sigmoid, fwd_mul(g, fwd_mul(y, fwd_sub(fill_like(y, 1.0), y))))
DTENSOR_UNARY(tanh, fwd_mul(g, fwd_sub(fill_like(y, 1.0), fwd_square(y))))
DTENSOR_UNARY(gelu, fwd_mul(g, gelu_derivative(x)))

#undef DTENSOR_UNARY

DTensor scale(const DTensor& x, double alpha) {
  DTensor y = unrecorded([&] { return fwd_scale(x, alpha); });
  return traced({&x}, y, [&] {
    return [alpha](const DTensor& g) -> Grads { return {fwd_scale(g, alpha)}; };
  });
}

DTensor cast(const DTensor& x, DType dtype) {
  DTensor y = unrecorded([&] { return fwd_cast(x, dtype); });
  if (!is_floating(x.dtype())) return y;
  const DType from = x.dtype();
  return traced({&x}, y,
                [&] { return [from](const DTensor& g) -> Grads { return {fwd_cast(g, from)}; }; });
}

DTensor add(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_add(a, b); });
  return traced({&a, &b}, y, [&] {
    return [sa = a.shape(), sb = b.shape()](const DTensor& g) -> Grads {
      return {sum_to(g, sa), sum_to(g, sb)};
    };
  });
}

DTensor sub(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_sub(a, b); });
  return traced({&a, &b}, y, [&] {
    return [sa = a.shape(), sb = b.shape()](const DTensor& g) -> Grads {
      return {sum_to(g, sa), sum_to(fwd_neg(g), sb)};
    };
  });
}

DTensor mul(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_mul(a, b); });
  return traced({&a, &b}, y, [&] {
    return [a, b](const DTensor& g) -> Grads {
      return {sum_to(fwd_mul(g, b), a.shape()), sum_to(fwd_mul(g, a), b.shape())};
    };
  });
}

DTensor div(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_div(a, b); });
  return traced({&a, &b}, y, [&] {
    return [a, b, y](const DTensor& g) -> Grads {
      DTensor ga = fwd_div(g, b);
      return {sum_to(ga, a.shape()), sum_to(fwd_neg(fwd_mul(ga, y)), b.shape())};
    };
  });
}

DTensor pow(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_pow(a, b); });
  return traced({&a, &b}, y, [&] {
    return [a, b, y](const DTensor& g) -> Grads {
      DTensor ga = fwd_mul(g, fwd_mul(b, fwd_pow(a, fwd_sub(b, fill_like(b, 1.0)))));
      DTensor gb = fwd_mul(g, fwd_mul(y, fwd_log(a)));
      return {sum_to(ga, a.shape()), sum_to(gb, b.shape())};
    };
  });
}

namespace {

// Gradient of maximum/minimum: to `a` where it won (ties to a), else to `b`.
DTensor select_grad(const DTensor& g, const DTensor& a, const DTensor& b, bool max) {
  DTensor wins = max ? greater_equal(a, b) : less_equal(a, b);
  return fwd_mul(g, fwd_cast(wins, g.dtype()));
}

}  // namespace

DTensor maximum(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_maximum(a, b); });
  return traced({&a, &b}, y, [&] {
    return [a, b](const DTensor& g) -> Grads {
      DTensor ga = select_grad(g, a, b, true);
      return {sum_to(ga, a.shape()), sum_to(fwd_sub(g, ga), b.shape())};
    };
  });
}

DTensor minimum(const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_minimum(a, b); });
  return traced({&a, &b}, y, [&] {
    return [a, b](const DTensor& g) -> Grads {
      DTensor ga = select_grad(g, a, b, false);
      return {sum_to(ga, a.shape()), sum_to(fwd_sub(g, ga), b.shape())};
    };
  });
}

DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b) {
  DTensor y = unrecorded([&] { return fwd_where(cond, a, b); });
  return traced({&a, &b}, y, [&] {
    return [cond, a, b](const DTensor& g) -> Grads {
      DTensor zero = fill_like(g, 0.0);
      return {sum_to(fwd_where(cond, g, zero), a.shape()),
              sum_to(fwd_where(cond, zero, g), b.shape())};
    };
  });
}

DTensor matmul(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  DTensor y = unrecorded([&] { return fwd_matmul(a, b, ta, tb); });
  return traced({&a, &b}, y, [&] {
    return [a, b, ta, tb](const DTensor& g) -> Grads {
      Grads grads(2);
      if (gradient_needed(0)) {
        DTensor ga = !ta ? (!tb ? fwd_matmul(g, b, false, true) : fwd_matmul(g, b, false, false))
                         : (!tb ? fwd_matmul(b, g, false, true) : fwd_matmul(b, g, true, true));
        grads[0] = sum_to(ga, a.shape());
      }
      if (gradient_needed(1)) {
        DTensor gb = !tb ? (!ta ? fwd_matmul(a, g, true, false) : fwd_matmul(a, g, false, false))
                         : (!ta ? fwd_matmul(g, a, true, false) : fwd_matmul(g, a, true, true));
        grads[1] = sum_to(gb, b.shape());
      }
      return grads;
    };
  });
}

namespace {

// `g` (of the reduced shape) broadcast back over the reduced `axes` of `x`.
DTensor unreduce(const DTensor& g, const DTensor& x, const std::vector<int64_t>& axes,
                 bool keepdims) {
  DTensor kept = keepdims ? g : fwd_reshape(g, reduced_shape(x.shape(), axes, true));
  NoRecord pause;
  return broadcast_to(kept, x.shape());
}

}  // namespace

DTensor reduce_sum(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = normalize_axes(axes, x, "reduce_sum");
  DTensor y = unrecorded([&] { return fwd_reduce_sum(x, norm, keepdims); });
  return traced({&x}, y, [&] {
    return
        [x, norm, keepdims](const DTensor& g) -> Grads { return {unreduce(g, x, norm, keepdims)}; };
  });
}

DTensor reduce_mean(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = normalize_axes(axes, x, "reduce_mean");
  DTensor y = unrecorded([&] { return fwd_reduce_mean(x, norm, keepdims); });
  return traced({&x}, y, [&] {
    return [x, norm, keepdims](const DTensor& g) -> Grads {
      double count = 1;
      for (int64_t a : norm) count *= static_cast<double>(x.shape()[a]);
      return {fwd_scale(unreduce(g, x, norm, keepdims), 1.0 / count)};
    };
  });
}

namespace {

DTensor extremum_grad(const DTensor& g, const DTensor& x, const DTensor& y,
                      const std::vector<int64_t>& axes, bool keepdims) {
  // The gradient is split equally among the elements equal to the extremum (TF, JAX). The tie
  // count is a sum over the reduced axes, so over a sharded axis it is a partial sum that the
  // division brings whole: the global count, as on one device.
  DTensor hit = fwd_cast(equal(x, unreduce(y, x, axes, keepdims)), x.dtype());
  DTensor ties = fwd_reduce_sum(hit, axes, /*keepdims=*/true);
  return fwd_mul(unreduce(g, x, axes, keepdims), fwd_div(hit, ties));
}

}  // namespace

DTensor reduce_max(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = normalize_axes(axes, x, "reduce_max");
  DTensor y = unrecorded([&] { return fwd_reduce_max(x, norm, keepdims); });
  return traced({&x}, y, [&] {
    return [x, y, norm, keepdims](const DTensor& g) -> Grads {
      return {extremum_grad(g, x, y, norm, keepdims)};
    };
  });
}

DTensor reduce_min(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = normalize_axes(axes, x, "reduce_min");
  DTensor y = unrecorded([&] { return fwd_reduce_min(x, norm, keepdims); });
  return traced({&x}, y, [&] {
    return [x, y, norm, keepdims](const DTensor& g) -> Grads {
      return {extremum_grad(g, x, y, norm, keepdims)};
    };
  });
}

DTensor softmax(const DTensor& x, int64_t axis) {
  axis = normalize_axis(axis, x.rank(), "softmax", x);
  DTensor y = unrecorded([&] { return fwd_softmax(x, axis); });
  return traced({&x}, y, [&] {
    return [y, axis](const DTensor& g) -> Grads {
      DTensor dot = fwd_reduce_sum(fwd_mul(g, y), {axis}, true);
      return {fwd_mul(y, fwd_sub(g, dot))};
    };
  });
}

DTensor log_softmax(const DTensor& x, int64_t axis) {
  axis = normalize_axis(axis, x.rank(), "log_softmax", x);
  DTensor y = unrecorded([&] { return fwd_log_softmax(x, axis); });
  return traced({&x}, y, [&] {
    return [y, axis](const DTensor& g) -> Grads {
      DTensor total = fwd_reduce_sum(g, {axis}, true);
      return {fwd_sub(g, fwd_mul(fwd_exp(y), total))};
    };
  });
}

DTensor logsumexp(const DTensor& x, int64_t axis, bool keepdims) {
  axis = normalize_axis(axis, x.rank(), "logsumexp", x);
  DTensor y = unrecorded([&] { return fwd_logsumexp(x, axis, keepdims); });
  return traced({&x}, y, [&] {
    return [x, y, axis, keepdims](const DTensor& g) -> Grads {
      DTensor y_full = unreduce(y, x, {axis}, keepdims);
      return {fwd_mul(unreduce(g, x, {axis}, keepdims), fwd_exp(fwd_sub(x, y_full)))};
    };
  });
}

DTensor sparse_softmax_cross_entropy(const DTensor& logits, const DTensor& labels) {
  DTensor y = unrecorded([&] { return fwd_sparse_softmax_cross_entropy(logits, labels); });
  return traced({&logits}, y, [&] {
    return [logits, labels](const DTensor& g) -> Grads {
      const int64_t axis = logits.rank() - 1;
      if (!axis_sharded(logits, axis)) {
        // Fused local kernel: (softmax - one_hot) * g.
        std::vector<int> letters = iota_letters(logits.rank() - 1);
        OpSignature sig{"sparse_softmax_cross_entropy_grad",
                        {{iota_letters(logits.rank()), false}, {letters, false}, {letters, false}},
                        iota_letters(logits.rank())};
        return {expand(sig, {&logits, &labels, &g}, logits.shape(), logits.dtype(),
                       4.0 * static_cast<double>(logits.num_elements()), [](const Shards& s) {
                         return kernels::sparse_softmax_cross_entropy_grad(s[0], s[1], s[2]);
                       })};
      }
      DTensor p = fwd_softmax(logits, axis);
      DTensor diff = fwd_sub(p, one_hot(labels, logits.shape()[axis], logits.dtype()));
      return {fwd_mul(diff, fwd_reshape(g, reduced_shape(logits.shape(), {axis}, true)))};
    };
  });
}

DTensor reshape(const DTensor& x, const Shape& shape) {
  DTensor y = unrecorded([&] { return fwd_reshape(x, shape); });
  return traced({&x}, y, [&] {
    return [from = x.shape()](const DTensor& g) -> Grads { return {fwd_reshape(g, from)}; };
  });
}

DTensor transpose(const DTensor& x, std::vector<int64_t> perm) {
  DTensor y = unrecorded([&] { return fwd_transpose(x, perm); });
  if (perm.empty()) {
    for (int64_t d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
  }
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return traced({&x}, y, [&] {
    return [inverse](const DTensor& g) -> Grads { return {fwd_transpose(g, inverse)}; };
  });
}

// relayout records itself on active tapes (dtensor/relayout.h's recorder, set by the tape).
DTensor traced_relayout(const DTensor& x, const Layout& layout) { return relayout(x, layout); }

namespace {

// The adjoint of slice: `g` placed at `begin` in zeros of `full`.
DTensor pad_to(const DTensor& g, const std::vector<int64_t>& begin, const Shape& size,
               const Shape& full) {
  std::vector<int> letters = iota_letters(g.rank());
  std::vector<std::pair<int64_t, int64_t>> pads;
  std::string key = "pad";
  for (int64_t d = 0; d < g.rank(); ++d) {
    pads.push_back({begin[d], full[d] - begin[d] - size[d]});
    if (size[d] != full[d]) letters[d] = kBroadcastDim;
    key += fmt::format(",{}:{}", pads.back().first, pads.back().second);
  }
  OpSignature sig{key, {{letters, true}}, letters, Linearity::kMultilinear};
  return expand(sig, {&g}, full, g.dtype(), static_cast<double>(num_elements(full)),
                [pads, letters](const Shards& s) {
                  std::vector<std::pair<int64_t, int64_t>> local(pads.size(), {0, 0});
                  for (size_t d = 0; d < letters.size(); ++d) {
                    if (letters[d] == kBroadcastDim) local[d] = pads[d];
                  }
                  return kernels::pad(s[0], local);
                });
}

// The adjoint of gather: `g` added into zero rows of params' shape at `indices`.
DTensor scatter_rows(const DTensor& params, const DTensor& indices, const DTensor& g,
                     int64_t axis) {
  // Every device scatters its local rows; the result is a partial sum over the mesh dims that
  // shard the indices, reduced when it reaches the variable's layout.
  DTensor idx = relayout(indices, indices.layout().without_partial());
  DTensor grad = relayout(g, g.layout().without_partial());
  const Shape shape = params.shape();
  Layout p_layout = Layout::replicated(params.mesh(), params.rank());
  std::vector<PartialDim> partial;
  const Mesh& mesh = params.mesh();
  // g's dims: [:axis] params dims, then index dims, then the rest. Keep it simple: bring g's
  // non-index dims unsharded and let the index sharding make the partial. The specs are set all
  // at once: changing them one by one passes through layouts that use a mesh dim twice.
  std::vector<std::string> g_specs;
  for (int64_t d = 0; d < grad.rank(); ++d) {
    bool index_dim = d >= axis && d < axis + idx.rank();
    g_specs.push_back(index_dim ? idx.layout().spec(d - axis) : std::string(Layout::kUnsharded));
  }
  grad = relayout(grad, Layout(g_specs, mesh));
  for (int64_t m = 0; m < mesh.rank(); ++m) {
    if ((idx.layout().sharded_mask() >> m) & 1u)
      partial.push_back({mesh.dims()[m].name, ReduceOp::kSum});
  }
  Layout out_layout = p_layout.with_partial(partial);
  std::vector<Tensor> shards;
  for (int64_t i = 0; i < mesh.num_local_devices(); ++i) {
    Tensor t = kernels::scatter_add(shape, idx.shard(i), grad.shard(i), axis);
    shards.push_back(t.with_device(Device{mesh.device_type(), mesh.local_device_ids()[i]}));
  }
  return DTensor::from_trusted_shards(shape, params.dtype(), out_layout, std::move(shards));
}

}  // namespace

DTensor concat(const std::vector<DTensor>& xs, int64_t axis) {
  if (xs.empty()) throw_error<InvalidArgumentError>("concat", "no inputs");
  const DTensor& first = xs[0];
  axis = normalize_axis(axis, first.rank(), "concat", first);
  std::vector<const DTensor*> inputs;
  Shape out = first.shape();
  out[axis] = 0;
  for (const DTensor& x : xs) {
    inputs.push_back(&x);
    bool fits = x.rank() == first.rank() && x.dtype() == first.dtype();
    for (int64_t d = 0; fits && d < x.rank(); ++d)
      fits = d == axis || x.shape()[d] == first.shape()[d];
    if (!fits) {
      throw_error<ShapeError>("concat", "{} does not fit {} along axis {}", x.short_string(),
                              first.short_string(), axis);
    }
    out[axis] += x.shape()[axis];
  }
  validate_shape(out, "concat");
  check_same_mesh("concat", inputs);
  std::vector<int> letters = iota_letters(first.rank());
  letters[axis] = kBroadcastDim;  // the joined dim stays whole on every device
  OpSignature sig{"concat" + std::to_string(xs.size()) + ":" + std::to_string(axis),
                  {},
                  letters,
                  Linearity::kAdditive};
  for (size_t i = 0; i < xs.size(); ++i) sig.operands.push_back({letters, true});
  const size_t n = xs.size();
  DTensor y = expand(sig, inputs, out, first.dtype(), static_cast<double>(num_elements(out)),
                     [n, axis](const Shards& s) {
                       std::vector<Tensor> parts;
                       for (size_t i = 0; i < n; ++i) parts.push_back(s[i]);
                       return kernels::concat(parts, axis);
                     });
  if (!tape_active() || !is_floating(y.dtype())) return y;
  std::vector<int64_t> sizes;
  for (const DTensor& x : xs) sizes.push_back(x.shape()[axis]);
  record_op(inputs, y, [sizes, axis, out](const DTensor& g) -> Grads {
    Grads grads;
    int64_t offset = 0;
    for (int64_t size : sizes) {
      std::vector<int64_t> begin(out.size(), 0);
      begin[axis] = offset;
      Shape extent(out.size(), -1);
      extent[axis] = size;
      grads.push_back(slice(g, begin, extent));
      offset += size;
    }
    return grads;
  });
  return y;
}

DTensor slice(const DTensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  if (static_cast<int64_t>(begin.size()) != x.rank() ||
      static_cast<int64_t>(size.size()) != x.rank()) {
    throw_error<ShapeError>("slice", "begin [{}] and size {} need one entry per dim of {}",
                            fmt::join(begin, ","), shape_to_string(size), x.short_string());
  }
  Shape out(size);
  std::vector<int> letters = iota_letters(x.rank());
  std::string key = "slice";
  for (int64_t d = 0; d < x.rank(); ++d) {
    // Compared as size <= dim - begin once begin is within the dim: begin + size may overflow.
    const bool begin_ok = begin[d] >= 0 && begin[d] <= x.shape()[d];
    if (begin_ok && out[d] == -1) out[d] = x.shape()[d] - begin[d];
    if (!begin_ok || out[d] < 0 || out[d] > x.shape()[d] - begin[d]) {
      throw_error<ShapeError>("slice", "box at [{}] of size {} does not fit {}",
                              fmt::join(begin, ","), shape_to_string(size), x.short_string());
    }
    if (out[d] != x.shape()[d]) letters[d] = kBroadcastDim;  // a cut dim is gathered first
    key += fmt::format(",{}:{}", begin[d], out[d]);
  }
  OpSignature sig{key, {{letters, true}}, letters, Linearity::kMultilinear};
  DTensor y = expand(sig, {&x}, out, x.dtype(), static_cast<double>(num_elements(out)),
                     [begin, out, letters](const Shards& s) {
                       std::vector<int64_t> b(begin.size(), 0);
                       Shape e(out.size(), -1);
                       for (size_t d = 0; d < letters.size(); ++d) {
                         if (letters[d] == kBroadcastDim) {
                           b[d] = begin[d];
                           e[d] = out[d];
                         }
                       }
                       return kernels::slice(s[0], b, e);
                     });
  const Shape full = x.shape();
  return traced({&x}, y, [&] {
    return [begin, out, full](const DTensor& g) -> Grads { return {pad_to(g, begin, out, full)}; };
  });
}

DTensor gather(const DTensor& params, const DTensor& indices, int64_t axis) {
  check_same_mesh("gather", {&params, &indices});
  axis = normalize_axis(axis, params.rank(), "gather", params);
  if (indices.dtype() != DType::kI32 && indices.dtype() != DType::kI64) {
    throw_error<DTypeError>("gather", "indices {} must be i32 or i64", indices.short_string());
  }
  // Letters: params dims 0..r-1 (axis kept whole), index dims r.., output in gather order.
  const int r = static_cast<int>(params.rank());
  std::vector<int> p_letters = iota_letters(params.rank());
  p_letters[axis] = kBroadcastDim;
  std::vector<int> i_letters = iota_letters(indices.rank(), r);
  std::vector<int> out_letters(p_letters.begin(), p_letters.begin() + axis);
  out_letters.insert(out_letters.end(), i_letters.begin(), i_letters.end());
  out_letters.insert(out_letters.end(), p_letters.begin() + axis + 1, p_letters.end());
  Shape out(params.shape().begin(), params.shape().begin() + axis);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), params.shape().begin() + axis + 1, params.shape().end());
  validate_shape(out, "gather");
  OpSignature sig{"gather:" + std::to_string(axis),
                  {{p_letters, true}, {i_letters, false}},
                  out_letters,
                  Linearity::kMultilinear};
  DTensor y =
      expand(sig, {&params, &indices}, out, params.dtype(), static_cast<double>(num_elements(out)),
             [axis](const Shards& s) { return kernels::gather(s[0], s[1], axis); });
  return traced({&params}, y, [&] {
    return [params, indices, axis](const DTensor& g) -> Grads {
      return {scatter_rows(params, indices, g, axis)};
    };
  });
}

DTensor fwd_layer_norm(const DTensor& x, const DTensor& gamma, const DTensor& beta, double eps) {
  check_same_mesh("layer_norm", {&x, &gamma, &beta});
  if (x.rank() < 1 || gamma.shape() != Shape{x.shape().back()} || beta.shape() != gamma.shape()) {
    throw_error<ShapeError>("layer_norm", "gamma {} and beta {} must be [D] for x {}",
                            gamma.short_string(), beta.short_string(), x.short_string());
  }
  std::vector<int> letters = iota_letters(x.rank());
  letters.back() = kBroadcastDim;  // normalised dim stays whole
  OpSignature sig{fmt::format("layer_norm:{}", eps),
                  {{letters, false}, {{kBroadcastDim}, false}, {{kBroadcastDim}, false}},
                  letters};
  return expand(sig, {&x, &gamma, &beta}, x.shape(), x.dtype(),
                8.0 * static_cast<double>(x.num_elements()),
                [eps](const Shards& s) { return kernels::layer_norm(s[0], s[1], s[2], eps).y; });
}

namespace {

// The VJP of layer_norm in DTensor ops (so it shards like the forward pass). With
// xhat = (x - mean) * rstd and gy = g * gamma:
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)),  dgamma = sum(g * xhat),  dbeta = sum(g)
// where means run over the last dim and sums over all the others.
std::vector<std::optional<DTensor>> layer_norm_grads(const DTensor& g, const DTensor& x,
                                                     const DTensor& gamma, double eps) {
  const int64_t last = x.rank() - 1;
  DTensor centered = fwd_sub(x, fwd_reduce_mean(x, {last}, true));
  DTensor var = fwd_reduce_mean(fwd_square(centered), {last}, true);
  DTensor rstd = fwd_rsqrt(fwd_add(var, fill_like(var, eps)));
  DTensor xhat = fwd_mul(centered, rstd);
  std::vector<std::optional<DTensor>> grads(3);
  if (gradient_needed(0)) {
    DTensor gy = fwd_mul(g, gamma);
    DTensor mean_gy = fwd_reduce_mean(gy, {last}, true);
    DTensor mean_gy_xhat = fwd_reduce_mean(fwd_mul(gy, xhat), {last}, true);
    grads[0] = fwd_mul(rstd, fwd_sub(fwd_sub(gy, mean_gy), fwd_mul(xhat, mean_gy_xhat)));
  }
  if (gradient_needed(1)) grads[1] = sum_to(fwd_mul(g, xhat), gamma.shape());
  if (gradient_needed(2)) grads[2] = sum_to(g, gamma.shape());
  return grads;
}

}  // namespace

DTensor layer_norm(const DTensor& x, const DTensor& gamma, const DTensor& beta, double eps) {
  DTensor y = unrecorded([&] { return fwd_layer_norm(x, gamma, beta, eps); });
  return traced({&x, &gamma, &beta}, y, [&] {
    return
        [x, gamma, eps](const DTensor& g) -> Grads { return layer_norm_grads(g, x, gamma, eps); };
  });
}

}  // namespace dtensor
