#include "ops/op_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <unordered_set>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/host_copy.h"
#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "ops/ops.h"

namespace dtensor {
namespace op_internal {

DTensor expand(const OpSignature& sig, const std::vector<const DTensor*>& inputs,
               const Shape& out_shape, DType out_dtype, double work, const LocalKernel& kernel,
               Stacking stacking) {
  check_same_mesh(sig.op, inputs);
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
  stacking.op = sig.op;
  DTensor y = run_local(ready, decision->output, out_shape, out_dtype, work, kernel, stacking);
  note_untraced(sig.op, inputs, y);  // an op with a VJP records y (or runs paused)
  return y;
}

std::vector<int> iota_letters(int64_t n, int start) {
  std::vector<int> letters(static_cast<size_t>(n));
  std::iota(letters.begin(), letters.end(), start);
  return letters;
}

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

int64_t checked_axis(const char* op, const DTensor& x, int64_t axis) {
  return normalize_axis(axis, x.rank(), op, [&x] { return x.short_string(); });
}

std::vector<int64_t> checked_axes(const char* op, const DTensor& x, std::vector<int64_t> axes) {
  return normalize_axes(std::move(axes), x.rank(), op, [&x] { return x.short_string(); });
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

std::string axes_attributes(const std::vector<int64_t>& axes, bool keepdims) {
  std::string attributes;
  for (int64_t a : axes) {
    if (!attributes.empty()) attributes.push_back(',');
    attributes += std::to_string(a);
  }
  return attributes + (keepdims ? ",k" : "");
}

bool has_partial_sum(const DTensor& x) {
  return x.layout().is_partial() && x.layout().partial()[0].op == ReduceOp::kSum;
}

DTensor without_partial(const DTensor& x) {
  return x.layout().is_partial() ? relayout(x, x.layout().without_partial()) : x;
}

DTensor unshard_axes(const DTensor& x, const std::vector<int64_t>& axes) {
  Layout l = x.layout().without_partial();
  for (int64_t a : axes) l = l.with_spec(a, Layout::kUnsharded);
  return relayout(x, l);
}

namespace {

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

// finite_values of one shard's values. On a device: sum(x - x), or sum(x / x) for a divisor,
// reduced there (NaN exactly when some value is infinite or NaN, or zero for a divisor) and one
// scalar read back.
bool exact_shard(const Tensor& t, bool divisor) {
  const int64_t n = t.num_elements();
  if (t.memory_space() != MemorySpace::kHost) {
    if (n == 0) return true;
    using kernels::BinaryOp;
    const Tensor terms = kernels::binary(divisor ? BinaryOp::kDiv : BinaryOp::kSub, t, t);
    const Tensor sum = kernels::reduce(kernels::ReduceKind::kSum, terms, {}, false);
    return std::isfinite(host_readable(kernels::cast(sum, DType::kF64)).data<double>()[0]);
  }
  if (t.dtype() == DType::kF64) {
    return finite_values<uint64_t, 0x7ff0000000000000u, 0x7fffffffffffffffu>(t.raw_data(), n,
                                                                             divisor);
  }
  if (t.dtype() == DType::kF32) {
    return finite_values<uint32_t, 0x7f800000u, 0x7fffffffu>(t.raw_data(), n, divisor);
  }
  return finite_values<uint16_t, 0x7f80u, 0x7fffu>(t.raw_data(), n, divisor);
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
    ok = exact_shard(t, divisor);
  }
  const Mesh& mesh = factor.mesh();
  if (mesh.num_processes() == 1) return ok;
  // The flag is put on each device (the mesh's backend reduces device memory) and read back.
  std::vector<Tensor> flags;
  for (int64_t id : mesh.local_device_ids()) {
    Tensor flag = Tensor::empty({}, DType::kBool);
    *flag.data<bool>() = !ok;
    flags.push_back(on_device(flag, mesh_device(mesh, id)));
  }
  const MeshDimMask every_dim = static_cast<MeshDimMask>((MeshDimMask{1} << mesh.rank()) - 1);
  return !*host_readable(all_reduce(mesh, every_dim, flags, ReduceOp::kMax)[0]).data<bool>();
}

}  // namespace

std::pair<DTensor, DTensor> exact_product_operands(const DTensor& a, const DTensor& b,
                                                   bool divide) {
  const bool term_is_a = has_partial_sum(a);
  if (!term_is_a && (divide || !has_partial_sum(b))) return {a, b};
  const DTensor& term = term_is_a ? a : b;
  DTensor factor = without_partial(term_is_a ? b : a);
  bool exact;
  if (StepObserver* hook = StepObserver::active()) {
    // The layout chosen here depends on the factor's values: the trace decides (inside the
    // recorded check, so its tiny all-reduce is not recorded twice) and a replay checks that the
    // values still call for the same choice.
    auto decided = std::make_shared<std::optional<bool>>();
    hook->effect("exact_factor", {&factor}, [divide, decided](const StepObserver::Inputs& in) {
      const bool now = exact_factor(*in[0], divide);
      if (!decided->has_value()) *decided = now;
      if (**decided != now) {
        throw_error<UnimplementedError>(
            divide ? "div" : "mul",
            "the captured step chose from the values of a factor how to pass a partial sum "
            "through this product, and the values now call for the other choice; run this step "
            "eagerly");
      }
    });
    exact = **decided;
  } else {
    exact = exact_factor(factor, divide);
  }
  DTensor kept = exact ? term : without_partial(term);
  return term_is_a ? std::make_pair(kept, factor) : std::make_pair(factor, kept);
}

DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.rank() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.rank(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) axes.push_back(d);
  }
  DTensor summed = axes.empty() ? g : reduce_sum(g, axes, true);
  return reshape(summed, shape);
}

DTensor fill_like(const DTensor& y, double value) {
  return fill(y.shape(), y.layout().without_partial(), value, y.dtype());
}

// 1 where y > 0, else 0, in y's dtype: ReLU's derivative read from its output (y > 0 exactly
// where the pre-activation is), for the VJPs of the ops that fuse a ReLU (dense, conv2d).
DTensor relu_mask(const DTensor& y) {
  const int rank = static_cast<int>(y.rank());
  OpSignature sig{"dense",  // its first user; the name plan caches and traces know
                  "relu_grad",
                  {OperandDims{iota_letters(rank), false}},
                  iota_letters(rank),
                  Linearity::kNone};
  return expand(sig, {&y}, y.shape(), y.dtype(), static_cast<double>(num_elements(y.shape())),
                [](const Shards& s) { return kernels::unary(kernels::UnaryOp::kReluGrad, s[0]); });
}

DTensor unreduce(const DTensor& g, const DTensor& x, const std::vector<int64_t>& axes,
                 bool keepdims) {
  DTensor kept = keepdims ? g : reshape(g, reduced_shape(x.shape(), axes, true));
  return broadcast_to(kept, x.shape());
}

}  // namespace op_internal
}  // namespace dtensor
