// The reductions family: reduce_sum/mean/max/min over axes, and argmax. A reduced letter is
// contracted: over a sharded axis the output is partial (sum, max or min terms) until consumed.
// Sums and means are linear, so partial-sum inputs pass through them.
#include <utility>

#include "kernels/kernels.h"
#include "ops/expand.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

using kernels::ReduceKind;

DTensor reduce_forward(const char* name, ReduceKind kind, const DTensor& x,
                       const std::vector<int64_t>& axes, bool keepdims);

// The deterministic mode's float sum or mean: partial terms reduced first, then one chunked sum
// per axis, the last axis first, so that the order of every addition is fixed by the global
// shape whatever the layout (ops/expand.h). A mean scales the sum once.
DTensor deterministic_reduce(const char* name, ReduceKind kind, const DTensor& x_in,
                             const std::vector<int64_t>& axes, bool keepdims) {
  DTensor x = without_partial(x_in);
  if (axes.size() == 1) return reduce_forward(name, kind, x, axes, keepdims);
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(x.shape()[a]);
  for (size_t i = axes.size(); i-- > 0;) {
    x = without_partial(reduce_forward(name, ReduceKind::kSum, x, {axes[i]}, true));
  }
  if (kind == ReduceKind::kMean) x = scale(x, 1.0 / count);
  return keepdims ? x : reshape(x, reduced_shape(x_in.shape(), axes, false));
}

// `axes` are already checked (checked_axes).
DTensor reduce_forward(const char* name, ReduceKind kind, const DTensor& x,
                       const std::vector<int64_t>& axes, bool keepdims) {
  const bool is_mean = kind == ReduceKind::kMean;
  const bool sum_like = kind == ReduceKind::kSum || is_mean;
  if (sum_like && is_floating(x.dtype()) && deterministic_sums() &&
      (axes.size() > 1 || x.layout().is_partial())) {
    return deterministic_reduce(name, kind, x, axes, keepdims);
  }
  // Integer means truncate, so they cannot be split into partial terms: reduce whole axes.
  const DTensor in = is_mean && !is_floating(x.dtype()) ? unshard_axes(x, axes) : x;
  OpSignature sig{name,
                  axes_attributes(axes, keepdims),
                  {{iota_letters(x.rank()), sum_like}},
                  reduced_letters(x.rank(), axes, keepdims),
                  sum_like ? Linearity::kMultilinear : Linearity::kNone,
                  kind == ReduceKind::kMax   ? ReduceOp::kMax
                  : kind == ReduceKind::kMin ? ReduceOp::kMin
                                             : ReduceOp::kSum};
  double count = 1;
  for (int64_t a : axes) count *= static_cast<double>(x.shape()[a]);
  const bool float_mean = is_mean && is_floating(x.dtype());
  // Float sums over the leading axis (a batch's) are batch-invariant (ops/expand.h): a sharded
  // batch sums to one device's bits. In the deterministic mode every float sum is, over one axis
  // at a time (deterministic_reduce).
  Stacking stacking;
  const bool chunked =
      !axes.empty() && (deterministic_sums() ? axes.size() == 1 : axes.front() == 0);
  if (sum_like && is_floating(x.dtype()) && chunked) {
    const int64_t axis = axes.front();
    stacking.contraction_axes = {axis};
    stacking.chunk_rows =
        invariant_chunk_rows(x.shape()[axis], static_cast<double>(x.num_elements()));
  }
  return expand(
      sig, {&in}, reduced_shape(x.shape(), axes, keepdims), x.dtype(),
      static_cast<double>(x.num_elements()),
      [=](const Shards& s) {
        if (float_mean) {
          // Sum locally, divide by the global count: exact for partial and uneven shards.
          return kernels::scale(kernels::reduce(ReduceKind::kSum, s[0], axes, keepdims),
                                1.0 / count);
        }
        return kernels::reduce(kind, s[0], axes, keepdims);
      },
      stacking);
}

// The gradient of reduce_max/min: split equally among the elements equal to the extremum (TF,
// JAX). The tie count is a sum over the reduced axes, so over a sharded axis it is a partial sum
// that the division brings whole: the global count, as on one device.
DTensor extremum_grad(const DTensor& g, const DTensor& x, const DTensor& y,
                      const std::vector<int64_t>& axes, bool keepdims) {
  DTensor hit = cast(equal(x, unreduce(y, x, axes, keepdims)), x.dtype());
  DTensor ties = reduce_sum(hit, axes, /*keepdims=*/true);
  return mul(unreduce(g, x, axes, keepdims), div(hit, ties));
}

}  // namespace

DTensor reduce_sum(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = checked_axes("reduce_sum", x, std::move(axes));
  return recorded(
      {&x}, [&] { return reduce_forward("reduce_sum", ReduceKind::kSum, x, norm, keepdims); },
      [&](const DTensor&) {
        return [x, norm, keepdims](const DTensor& g) -> Grads {
          return {unreduce(g, x, norm, keepdims)};
        };
      });
}

DTensor reduce_mean(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = checked_axes("reduce_mean", x, std::move(axes));
  return recorded(
      {&x}, [&] { return reduce_forward("reduce_mean", ReduceKind::kMean, x, norm, keepdims); },
      [&](const DTensor&) {
        return [x, norm, keepdims](const DTensor& g) -> Grads {
          double count = 1;
          for (int64_t a : norm) count *= static_cast<double>(x.shape()[a]);
          return {scale(unreduce(g, x, norm, keepdims), 1.0 / count)};
        };
      });
}

DTensor reduce_max(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = checked_axes("reduce_max", x, std::move(axes));
  return recorded(
      {&x}, [&] { return reduce_forward("reduce_max", ReduceKind::kMax, x, norm, keepdims); },
      [&](const DTensor& y) {
        return [x, y, norm, keepdims](const DTensor& g) -> Grads {
          return {extremum_grad(g, x, y, norm, keepdims)};
        };
      });
}

DTensor reduce_min(const DTensor& x, std::vector<int64_t> axes, bool keepdims) {
  std::vector<int64_t> norm = checked_axes("reduce_min", x, std::move(axes));
  return recorded(
      {&x}, [&] { return reduce_forward("reduce_min", ReduceKind::kMin, x, norm, keepdims); },
      [&](const DTensor& y) {
        return [x, y, norm, keepdims](const DTensor& g) -> Grads {
          return {extremum_grad(g, x, y, norm, keepdims)};
        };
      });
}

// ---- argmax (an i64 output: nothing to differentiate, nothing recorded) ----------------------

DTensor argmax(const DTensor& x, int64_t axis, bool keepdims) {
  axis = checked_axis("argmax", x, axis);
  // The winning index is global, so the axis is brought whole onto each device.
  DTensor in = unshard_axes(x, {axis});
  OpSignature sig{"argmax",
                  axes_attributes({axis}, keepdims),
                  {{iota_letters(x.rank()), false}},
                  reduced_letters(x.rank(), {axis}, keepdims)};
  return expand(sig, {&in}, reduced_shape(x.shape(), {axis}, keepdims), DType::kI64,
                static_cast<double>(x.num_elements()),
                [=](const Shards& s) { return kernels::argmax(s[0], axis, keepdims); });
}

}  // namespace dtensor
