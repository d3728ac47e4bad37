// The shape family: reshape, transpose, broadcast_to, concat, slice, and traced_relayout (the
// op-API spelling of relayout). They move or copy values without arithmetic, so they are linear:
// partial sums pass through. Dims an op cuts or joins are kept whole on every device; others keep
// their sharding.
#include <algorithm>

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

// ---- reshape ---------------------------------------------------------------------------------

namespace {

// The output specs of reshaping x to `target` as views of x's shards. The two shapes split into
// groups of consecutive dims with equal products ([B, T, D] to [B*T, H, D/H]: {B, T}, {D}).
// A sharded dim keeps its sharding, on its group's first output dim, when it is its group's
// first dim and either the group maps one dim to one of the same size, or both first sizes are
// divisible by the shard count: then every shard is the same block of the group's elements
// (heads split out of a sharded feature dim, a batch-sharded dim merged with the next). Unsharded
// size-1 dims belong to no group. Other sharded dims are gathered.
std::vector<std::string> reshaped_specs(const DTensor& x, const Shape& target) {
  std::vector<std::string> out(target.size(), Layout::kUnsharded);
  const Shape& from = x.shape();
  if (x.num_elements() == 0) {  // no groups to speak of: only an unchanged shape keeps its specs
    if (from == target) return x.layout().sharding_specs();
    return out;
  }
  size_t i = 0, j = 0;
  while (i < from.size() && j < target.size()) {
    // Unsharded size-1 dims order no elements: they start no group, so that a sharded dim after
    // them stays first in its own ([1, H, D] with H sharded to [H, D]: a weight's gradient summed
    // over the batch with keepdims).
    while (i < from.size() && from[i] == 1 && !x.layout().is_sharded(static_cast<int64_t>(i))) ++i;
    while (j < target.size() && target[j] == 1 && (i == from.size() || from[i] != 1)) ++j;
    if (i == from.size() || j == target.size()) break;
    const size_t i0 = i, j0 = j;
    int64_t px = from[i++], pt = target[j++];
    while (px != pt) {
      if (px < pt)
        px *= from[i++];
      else
        pt *= target[j++];
    }
    if (!x.layout().is_sharded(static_cast<int64_t>(i0))) continue;
    const std::string& spec = x.layout().spec(static_cast<int64_t>(i0));
    const int64_t k = x.mesh().dim_size(spec);
    const bool same = i - i0 == 1 && j - j0 == 1;
    if (same || (from[i0] % k == 0 && target[j0] % k == 0)) out[j0] = spec;
  }
  return out;
}

// No kernel: each shard is a view of the relayouted input's shard.
DTensor reshape_forward(const DTensor& x, const Shape& shape) {
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
  Layout in_layout = x.layout();
  std::vector<std::string> out_specs = reshaped_specs(x, target);
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (in_layout.is_sharded(d) &&
        std::find(out_specs.begin(), out_specs.end(), in_layout.spec(d)) == out_specs.end()) {
      in_layout = in_layout.with_spec(d, Layout::kUnsharded);
    }
  }
  DTensor in = relayout(x, in_layout);
  Layout out_layout(out_specs, x.mesh(), in_layout.partial());
  auto views = [target, out_layout](const DTensor& in) {
    std::vector<Tensor> shards;
    for (size_t i = 0; i < in.shards().size(); ++i) {
      shards.push_back(
          in.shard(static_cast<int64_t>(i))
              .reshaped(out_layout.shard_shape(target, in.mesh().local_device_ids()[i])));
    }
    return DTensor::from_trusted_shards(target, in.dtype(), out_layout, std::move(shards));
  };
  // Traced: the views are made again from the replayed input.
  if (StepObserver* hook = StepObserver::active()) {
    return hook->call("reshape", {&in},
                      [views](const StepObserver::Inputs& ins) { return views(*ins[0]); });
  }
  return views(in);
}

}  // namespace

DTensor reshape(const DTensor& x, const Shape& shape) {
  return recorded(
      {&x}, [&] { return reshape_forward(x, shape); },
      [&](const DTensor&) {
        return [from = x.shape()](const DTensor& g) -> Grads { return {reshape(g, from)}; };
      });
}

// ---- transpose -------------------------------------------------------------------------------

namespace {

// `perm` is already checked (empty: reversed dims).
DTensor transpose_forward(const DTensor& x, const std::vector<int64_t>& perm) {
  std::vector<int> out_letters;
  Shape out;
  std::string attributes;
  for (int64_t p : perm) {
    out_letters.push_back(static_cast<int>(p));
    out.push_back(x.shape()[p]);
    attributes += "," + std::to_string(p);
  }
  OpSignature sig{"transpose",
                  attributes,
                  {{iota_letters(x.rank()), true}},
                  out_letters,
                  Linearity::kMultilinear};
  return expand(sig, {&x}, out, x.dtype(), static_cast<double>(x.num_elements()),
                [perm](const Shards& s) { return kernels::transpose(s[0], perm); });
}

}  // namespace

DTensor transpose(const DTensor& x, std::vector<int64_t> perm) {
  if (perm.empty()) {
    for (int64_t d = x.rank() - 1; d >= 0; --d) perm.push_back(d);
  }
  check_permutation(perm, x.rank(), "transpose", [&x] { return x.short_string(); });
  return recorded(
      {&x}, [&] { return transpose_forward(x, perm); },
      [&](const DTensor&) {
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) {
          inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
        }
        return [inverse](const DTensor& g) -> Grads { return {transpose(g, inverse)}; };
      });
}

// ---- broadcast_to ----------------------------------------------------------------------------

namespace {

DTensor broadcast_to_forward(const DTensor& x, const Shape& shape) {
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
  std::string attributes;
  for (int64_t d : shape) attributes += "," + std::to_string(d);
  OpSignature sig{"broadcast_to",
                  attributes,
                  {dims},
                  iota_letters(static_cast<int64_t>(shape.size())),
                  Linearity::kMultilinear};
  return expand(sig, {&x}, shape, x.dtype(), static_cast<double>(num_elements(shape)),
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
}

}  // namespace

DTensor broadcast_to(const DTensor& x, const Shape& shape) {
  return recorded(
      {&x}, [&] { return broadcast_to_forward(x, shape); },
      [&](const DTensor&) {
        return [from = x.shape()](const DTensor& g) -> Grads { return {sum_to(g, from)}; };
      });
}

// ---- concat ----------------------------------------------------------------------------------

namespace {

// `axis` is already checked; `inputs` point at xs.
DTensor concat_forward(const std::vector<DTensor>& xs, const std::vector<const DTensor*>& inputs,
                       int64_t axis, const Shape& out) {
  std::vector<int> letters = iota_letters(xs[0].rank());
  letters[axis] = kBroadcastDim;  // the joined dim stays whole on every device
  OpSignature sig{"concat", std::to_string(axis), {}, letters, Linearity::kAdditive};
  for (size_t i = 0; i < xs.size(); ++i) sig.operands.push_back({letters, true});
  const size_t n = xs.size();
  return expand(sig, inputs, out, xs[0].dtype(), static_cast<double>(num_elements(out)),
                [n, axis](const Shards& s) {
                  std::vector<Tensor> parts;
                  for (size_t i = 0; i < n; ++i) parts.push_back(s[i]);
                  return kernels::concat(parts, axis);
                });
}

}  // namespace

DTensor concat(const std::vector<DTensor>& xs, int64_t axis) {
  if (xs.empty()) throw_error<InvalidArgumentError>("concat", "no inputs");
  const DTensor& first = xs[0];
  axis = checked_axis("concat", first, axis);
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
  return recorded(
      inputs, [&] { return concat_forward(xs, inputs, axis, out); },
      [&](const DTensor&) {
        std::vector<int64_t> sizes;
        for (const DTensor& x : xs) sizes.push_back(x.shape()[axis]);
        return [sizes, axis, out](const DTensor& g) -> Grads {
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
        };
      });
}

// ---- slice -----------------------------------------------------------------------------------

namespace {

// The box's extent (size with -1 resolved), checked against x.
Shape slice_extent(const DTensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  if (static_cast<int64_t>(begin.size()) != x.rank() ||
      static_cast<int64_t>(size.size()) != x.rank()) {
    throw_error<ShapeError>("slice", "begin [{}] and size {} need one entry per dim of {}",
                            fmt::join(begin, ","), shape_to_string(size), x.short_string());
  }
  Shape out(size);
  for (int64_t d = 0; d < x.rank(); ++d) {
    // Compared as size <= dim - begin once begin is within the dim: begin + size may overflow.
    const bool begin_ok = begin[d] >= 0 && begin[d] <= x.shape()[d];
    if (begin_ok && out[d] == -1) out[d] = x.shape()[d] - begin[d];
    if (!begin_ok || out[d] < 0 || out[d] > x.shape()[d] - begin[d]) {
      throw_error<ShapeError>("slice", "box at [{}] of size {} does not fit {}",
                              fmt::join(begin, ","), shape_to_string(size), x.short_string());
    }
  }
  return out;
}

// The letters of a box of extent `box` in `full`: a cut dim (gathered first) has none.
std::vector<int> box_letters(const Shape& box, const Shape& full) {
  std::vector<int> letters = iota_letters(static_cast<int64_t>(full.size()));
  for (size_t d = 0; d < full.size(); ++d) {
    if (box[d] != full[d]) letters[d] = kBroadcastDim;
  }
  return letters;
}

// The attributes of a box op: ",begin:extent" per dim.
std::string box_attributes(const std::vector<int64_t>& begin, const Shape& box) {
  std::string attributes;
  for (size_t d = 0; d < box.size(); ++d) attributes += fmt::format(",{}:{}", begin[d], box[d]);
  return attributes;
}

DTensor slice_forward(const DTensor& x, const std::vector<int64_t>& begin, const Shape& out) {
  std::vector<int> letters = box_letters(out, x.shape());
  OpSignature sig{
      "slice", box_attributes(begin, out), {{letters, true}}, letters, Linearity::kMultilinear};
  return expand(sig, {&x}, out, x.dtype(), static_cast<double>(num_elements(out)),
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
}

// The adjoint of slice: `g` (the box at `begin`) placed in zeros of `full`.
DTensor pad_to(const DTensor& g, const std::vector<int64_t>& begin, const Shape& full) {
  std::vector<int> letters = box_letters(g.shape(), full);
  std::vector<std::pair<int64_t, int64_t>> pads;
  std::string attributes;
  for (int64_t d = 0; d < g.rank(); ++d) {
    pads.push_back({begin[d], full[d] - begin[d] - g.shape()[d]});
    attributes += fmt::format(",{}:{}", pads.back().first, pads.back().second);
  }
  OpSignature sig{"pad", attributes, {{letters, true}}, letters, Linearity::kMultilinear};
  return expand(sig, {&g}, full, g.dtype(), static_cast<double>(num_elements(full)),
                [pads, letters](const Shards& s) {
                  std::vector<std::pair<int64_t, int64_t>> local(pads.size(), {0, 0});
                  for (size_t d = 0; d < letters.size(); ++d) {
                    if (letters[d] == kBroadcastDim) local[d] = pads[d];
                  }
                  return kernels::pad(s[0], local);
                });
}

}  // namespace

DTensor slice(const DTensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  const Shape out = slice_extent(x, begin, size);
  return recorded(
      {&x}, [&] { return slice_forward(x, begin, out); },
      [&](const DTensor&) {
        return [begin, full = x.shape()](const DTensor& g) -> Grads {
          return {pad_to(g, begin, full)};
        };
      });
}

// ---- traced_relayout -------------------------------------------------------------------------

// relayout records itself on active tapes (the tape listens through dtensor/step_observer.h).
DTensor traced_relayout(const DTensor& x, const Layout& layout) { return relayout(x, layout); }

}  // namespace dtensor
