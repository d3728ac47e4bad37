// The gather/scatter family: gather (rows of params at integer indices; its VJP scatters the
// gradient back) and one_hot. The gathered axis is kept whole on every device; the index dims of
// the output take the indices' sharding.
#include <string>

#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

void check_indices(const char* op, const DTensor& indices) {
  if (indices.dtype() != DType::kI32 && indices.dtype() != DType::kI64) {
    throw_error<DTypeError>(op, "indices {} must be i32 or i64", indices.short_string());
  }
}

}  // namespace

// ---- gather ----------------------------------------------------------------------------------

namespace {

// `axis` is already checked.
DTensor gather_forward(const DTensor& params, const DTensor& indices, int64_t axis) {
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
  OpSignature sig{"gather",
                  std::to_string(axis),
                  {{p_letters, true}, {i_letters, false}},
                  out_letters,
                  Linearity::kMultilinear};
  return expand(sig, {&params, &indices}, out, params.dtype(),
                static_cast<double>(num_elements(out)),
                [axis](const Shards& s) { return kernels::gather(s[0], s[1], axis); });
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
  const Layout out_layout = p_layout.with_partial(partial);
  // Rows gathered along axis 0 by indices sharded on their first dim only (a batch over data):
  // the scatter is a sum over the index rows, made batch-invariant like reduce_sum's
  // (Stacking::chunk_rows, ops/expand.h), so that data=8 gives one device's bits. Other
  // shardings keep one scatter per device.
  Stacking stacking;
  bool rows_only = axis == 0 && idx.rank() >= 1;
  for (int64_t d = 1; d < idx.rank() && rows_only; ++d) rows_only = !idx.layout().is_sharded(d);
  if (rows_only) {
    stacking.contraction_axes = {0, 0};
    stacking.chunk_rows =
        invariant_chunk_rows(idx.shape()[0], static_cast<double>(num_elements(grad.shape())));
  }
  return run_local(
      {&idx, &grad}, out_layout, shape, params.dtype(),
      static_cast<double>(num_elements(grad.shape())),
      [shape, axis](const Shards& s) { return kernels::scatter_add(shape, s[0], s[1], axis); },
      stacking);
}

}  // namespace

DTensor gather(const DTensor& params, const DTensor& indices, int64_t axis) {
  check_same_mesh("gather", {&params, &indices});
  axis = checked_axis("gather", params, axis);
  check_indices("gather", indices);
  return recorded(
      {&params}, [&] { return gather_forward(params, indices, axis); },
      [&](const DTensor&) {
        return [params, indices, axis](const DTensor& g) -> Grads {
          return {scatter_rows(params, indices, g, axis)};
        };
      });
}

// ---- one_hot (integer indices in: nothing to differentiate, nothing recorded) ----------------

DTensor one_hot(const DTensor& indices, int64_t depth, DType dtype) {
  check_indices("one_hot", indices);
  if (depth < 0) throw_error<InvalidArgumentError>("one_hot", "negative depth {}", depth);
  std::vector<int> out_letters = iota_letters(indices.rank());
  out_letters.push_back(kBroadcastDim);
  Shape out = indices.shape();
  out.push_back(depth);
  validate_shape(out, "one_hot");  // a huge depth must not overflow the element count
  OpSignature sig{"one_hot", {}, {{iota_letters(indices.rank()), false}}, out_letters};
  return expand(sig, {&indices}, out, dtype, static_cast<double>(num_elements(out)),
                [=](const Shards& s) { return kernels::one_hot(s[0], depth, dtype); });
}

}  // namespace dtensor
