// The pooling family: max_pool2d and avg_pool2d over the H and W of NHWC activations, with their
// gradients as internal ops expanded the same way. Letters: x [N, H, W, C] -> y [N, H', W', C];
// N and C shard freely with no communication (each window is within one image and one channel);
// H and W follow plan_*_spatial below. avg is linear (partial sums pass through), max is not.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "ops/halo_expand.h"
#include "ops/halo_window.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

constexpr int kN = 0, kC = 3;

struct PoolShapes {
  kernels::Pool2dParams params;
  Shape out;  // [n, oh, ow, c]
};

// (before, after) padding of one spatial dim (TF's SAME: the odd one after).
std::pair<int64_t, int64_t> resolve_padding(const Padding2d& padding, bool along_h, int64_t in,
                                            int64_t k, int64_t stride) {
  switch (padding.kind) {
    case Padding2d::kValid:
      break;
    case Padding2d::kSame: {
      const int64_t out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
      return {total / 2, total - total / 2};
    }
    case Padding2d::kExplicit:
      return along_h ? std::make_pair(padding.top, padding.bottom)
                     : std::make_pair(padding.left, padding.right);
  }
  return {0, 0};
}

// Checks x (of `x_shape`, named `x_name`) against `options`; errors name `op`.
PoolShapes pool_shapes(const char* op, const Shape& x_shape, const std::string& x_name,
                       const Pool2dOptions& options) {
  if (x_shape.size() != 4) throw_error<ShapeError>(op, "x {} must be [n,h,w,c]", x_name);
  const auto& k = options.window;
  const auto& s = options.strides;
  if (k[0] < 1 || k[1] < 1) {
    throw_error<InvalidArgumentError>(op, "window must be >= 1, got {}x{}", k[0], k[1]);
  }
  if (s[0] < 1 || s[1] < 1) {
    throw_error<InvalidArgumentError>(op, "strides must be >= 1, got {}x{}", s[0], s[1]);
  }
  const Padding2d& p = options.padding;
  if (p.kind == Padding2d::kExplicit &&
      (p.top < 0 || p.bottom < 0 || p.left < 0 || p.right < 0 || p.top >= k[0] ||
       p.bottom >= k[0] || p.left >= k[1] || p.right >= k[1])) {
    throw_error<InvalidArgumentError>(
        op, "explicit paddings must be >= 0 and smaller than the {}x{} window, got {},{},{},{}",
        k[0], k[1], p.top, p.bottom, p.left, p.right);
  }
  PoolShapes r;
  kernels::Pool2dParams& q = r.params;
  q.window_h = k[0], q.window_w = k[1], q.stride_h = s[0], q.stride_w = s[1];
  std::tie(q.pad_top, q.pad_bottom) = resolve_padding(p, true, x_shape[1], k[0], s[0]);
  std::tie(q.pad_left, q.pad_right) = resolve_padding(p, false, x_shape[2], k[1], s[1]);
  const int64_t oh = kernels::conv_output_size(x_shape[1], q.pad_top, q.pad_bottom, k[0], 1, s[0]);
  const int64_t ow = kernels::conv_output_size(x_shape[2], q.pad_left, q.pad_right, k[1], 1, s[1]);
  if (oh < 1 || ow < 1) {
    throw_error<ShapeError>(op, "the {}x{} window does not fit x {} padded to {}x{}", k[0], k[1],
                            x_name, x_shape[1] + q.pad_top + q.pad_bottom,
                            x_shape[2] + q.pad_left + q.pad_right);
  }
  r.out = {x_shape[0], oh, ow, x_shape[3]};
  return r;
}

void check_float(const char* op, const DTensor& x) {
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>(op, "{} must be f32, f64 or bf16", x.short_string());
  }
}

double window_work(const Shape& out, const kernels::Pool2dParams& p) {
  return static_cast<double>(num_elements(out)) * static_cast<double>(p.window_h * p.window_w);
}

// ---- Spatial sharding: the one decision per op that halo exchange replaces ---------------------
//
// How a pooling op (and its gradient) treats a sharded H or W. kGather keeps both whole (letters
// kBroadcastDim): the path of activations that are not spatially sharded. kHalo keeps them
// sharded, as for conv2d (ops/conv.cc): each shard's windows get their rows from the neighbours
// in one halo exchange per sharded dim, and the input gradient goes back through the adjoint.
// Padding stays at the global edges, so max still ignores it and avg still divides by each
// window's unpadded count.
enum class SpatialPlan { kGather, kHalo };

bool spatially_sharded(const DTensor& t) {
  return t.rank() == 4 && (t.layout().is_sharded(1) || t.layout().is_sharded(2));
}

SpatialPlan plan_max_pool2d_spatial(const DTensor& x, const kernels::Pool2dParams& /*p*/) {
  return spatially_sharded(x) ? SpatialPlan::kHalo : SpatialPlan::kGather;
}
SpatialPlan plan_avg_pool2d_spatial(const DTensor& x, const kernels::Pool2dParams& /*p*/) {
  return spatially_sharded(x) ? SpatialPlan::kHalo : SpatialPlan::kGather;
}

constexpr int kH = 1, kW = 2;
const std::vector<int> kSpatialLetters = {kN, kH, kW, kC};

HaloWindow2d pool_windows(const Layout& x_layout, const Shape& x_shape, const Shape& out,
                          const kernels::Pool2dParams& p) {
  return HaloWindow2d(x_layout, x_shape, out[1], out[2],
                      WindowDim{p.window_h, p.stride_h, 1, p.pad_top},
                      WindowDim{p.window_w, p.stride_w, 1, p.pad_left});
}

// The kernel parameters of local device i on its extended window.
kernels::Pool2dParams halo_params(kernels::Pool2dParams p, const HaloWindow2d& window, size_t i) {
  const LocalPadding pad = window.local_padding(i);
  p.pad_top = pad.top, p.pad_bottom = pad.bottom, p.pad_left = pad.left, p.pad_right = pad.right;
  return p;
}

// y = pool(x) with H and/or W sharded (`max` or avg); `save`: where to keep x's extended windows
// for the gradient (null: nowhere).
DTensor pool2d_halo(const char* op, bool max, const DTensor& x, const PoolShapes& shapes,
                    std::shared_ptr<const SavedWindows>* save) {
  OpSignature sig{op,
                  "halo",
                  {{kSpatialLetters, !max}},
                  kSpatialLetters,
                  max ? Linearity::kNone : Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&x});
  const DTensor& xs = in.inputs[0];
  const Layout& out_layout = in.decision->output;
  const HaloWindow2d window = pool_windows(xs.layout(), x.shape(), shapes.out, shapes.params);
  const std::vector<Tensor> ext = window.extend(xs.shards());
  if (save) *save = std::make_shared<const SavedWindows>(SavedWindows{xs.layout(), ext});
  const auto& ids = x.mesh().local_device_ids();
  std::vector<Tensor> y = run_per_device(
      x.mesh(), x.dtype(), [&](size_t i) { return out_layout.shard_shape(shapes.out, ids[i]); },
      [&](size_t i) { return ext[i].num_elements() > 0; },
      [&](size_t i) {
        const kernels::Pool2dParams p = halo_params(shapes.params, window, i);
        return max ? kernels::max_pool2d(ext[i], p) : kernels::avg_pool2d(ext[i], p);
      });
  return DTensor::from_trusted_shards(shapes.out, x.dtype(), out_layout, std::move(y));
}

// dx of max_pool2d with H and/or W sharded: x's windows extended, dy routed within each, the
// halos summed back to their owners. `saved`: x's windows from the forward pass, used when x has
// the layout they were made in.
DTensor max_pool2d_backprop_halo(const DTensor& x, const DTensor& dy, const PoolShapes& shapes,
                                 const SavedWindows* saved) {
  OpSignature sig{"max_pool2d",
                  "grad,halo",
                  {{kSpatialLetters, false}, {kSpatialLetters, true}},
                  kSpatialLetters,
                  Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&x, &dy});
  const DTensor& xs = in.inputs[0];
  const DTensor& dys = in.inputs[1];
  const HaloWindow2d window = pool_windows(xs.layout(), x.shape(), shapes.out, shapes.params);
  const std::vector<Tensor> ext =
      saved && saved->layout == xs.layout() ? saved->windows : window.extend(xs.shards());
  std::vector<Tensor> dext = run_per_device(
      x.mesh(), x.dtype(), [&](size_t i) { return ext[i].shape(); },
      [&](size_t i) { return dys.shard(static_cast<int64_t>(i)).num_elements() > 0; },
      [&](size_t i) {
        return kernels::max_pool2d_grad(ext[i], dys.shard(static_cast<int64_t>(i)),
                                        halo_params(shapes.params, window, i));
      });
  return DTensor::from_trusted_shards(x.shape(), x.dtype(), in.decision->output,
                                      window.extend_adjoint(dext));
}

// dx of avg_pool2d with H and/or W sharded: dy spread over each extended window, the halos
// summed back to their owners.
DTensor avg_pool2d_backprop_halo(const Shape& x_shape, const DTensor& dy,
                                 const PoolShapes& shapes) {
  OpSignature sig{"avg_pool2d",
                  "grad,halo",
                  {{kSpatialLetters, true}},
                  kSpatialLetters,
                  Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&dy});
  const DTensor& dys = in.inputs[0];
  const Layout& out_layout = in.decision->output;
  const HaloWindow2d window = pool_windows(out_layout, x_shape, shapes.out, shapes.params);
  auto ext_shape = [&](size_t i) {
    const Tensor& dyi = dys.shard(static_cast<int64_t>(i));
    return window.extended_shape(i, dyi.dim(0), dyi.dim(3));
  };
  std::vector<Tensor> dext = run_per_device(
      dy.mesh(), dy.dtype(), ext_shape,
      [&](size_t i) { return dys.shard(static_cast<int64_t>(i)).num_elements() > 0; },
      [&](size_t i) {
        return kernels::avg_pool2d_grad(ext_shape(i), dys.shard(static_cast<int64_t>(i)),
                                        halo_params(shapes.params, window, i));
      });
  return DTensor::from_trusted_shards(x_shape, dy.dtype(), out_layout, window.extend_adjoint(dext));
}

constexpr int kWholeH = kBroadcastDim, kWholeW = kBroadcastDim;
const std::vector<int> kGatheredLetters = {kN, kWholeH, kWholeW, kC};

// ---- max_pool2d --------------------------------------------------------------------------------

DTensor max_pool2d_forward(const DTensor& x, const Pool2dOptions& options,
                           std::shared_ptr<const SavedWindows>* save) {
  check_float("max_pool2d", x);
  const PoolShapes shapes = pool_shapes("max_pool2d", x.shape(), x.short_string(), options);
  switch (plan_max_pool2d_spatial(x, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return pool2d_halo("max_pool2d", true, x, shapes, save);
  }
  OpSignature sig{"max_pool2d", {}, {{kGatheredLetters, false}}, kGatheredLetters};
  const kernels::Pool2dParams params = shapes.params;
  return expand(sig, {&x}, shapes.out, x.dtype(), window_work(shapes.out, params),
                [params](const Shards& s) { return kernels::max_pool2d(s[0], params); });
}

// dx: dy routed to the first maximum of each window. Linear in dy, not in x.
DTensor max_pool2d_backprop(const DTensor& x, const DTensor& dy, const Pool2dOptions& options,
                            const SavedWindows* saved) {
  const PoolShapes shapes = pool_shapes("max_pool2d", x.shape(), x.short_string(), options);
  switch (plan_max_pool2d_spatial(x, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return max_pool2d_backprop_halo(x, dy, shapes, saved);
  }
  OpSignature sig{"max_pool2d",
                  "grad",
                  {{kGatheredLetters, false}, {kGatheredLetters, true}},
                  kGatheredLetters,
                  Linearity::kMultilinear};
  const kernels::Pool2dParams params = shapes.params;
  return expand(sig, {&x, &dy}, x.shape(), x.dtype(), window_work(shapes.out, params),
                [params](const Shards& s) { return kernels::max_pool2d_grad(s[0], s[1], params); });
}

// ---- avg_pool2d --------------------------------------------------------------------------------

DTensor avg_pool2d_forward(const DTensor& x, const Pool2dOptions& options) {
  check_float("avg_pool2d", x);
  const PoolShapes shapes = pool_shapes("avg_pool2d", x.shape(), x.short_string(), options);
  switch (plan_avg_pool2d_spatial(x, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return pool2d_halo("avg_pool2d", false, x, shapes, nullptr);
  }
  OpSignature sig{
      "avg_pool2d", {}, {{kGatheredLetters, true}}, kGatheredLetters, Linearity::kMultilinear};
  const kernels::Pool2dParams params = shapes.params;
  return expand(sig, {&x}, shapes.out, x.dtype(), window_work(shapes.out, params),
                [params](const Shards& s) { return kernels::avg_pool2d(s[0], params); });
}

// dx: dy / count spread over each window's unpadded positions. Linear.
DTensor avg_pool2d_backprop(const Shape& x_shape, const DTensor& dy, const Pool2dOptions& options) {
  const PoolShapes shapes = pool_shapes("avg_pool2d", x_shape, shape_to_string(x_shape), options);
  switch (plan_avg_pool2d_spatial(dy, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return avg_pool2d_backprop_halo(x_shape, dy, shapes);
  }
  OpSignature sig{
      "avg_pool2d", "grad", {{kGatheredLetters, true}}, kGatheredLetters, Linearity::kMultilinear};
  const kernels::Pool2dParams params = shapes.params;
  const Shape whole = x_shape;
  return expand(sig, {&dy}, whole, dy.dtype(), window_work(shapes.out, params),
                [params, whole](const Shards& s) {
                  const Shape local = {s[0].shape()[0], whole[1], whole[2], s[0].shape()[3]};
                  return kernels::avg_pool2d_grad(local, s[0], params);
                });
}

}  // namespace

DTensor max_pool2d(const DTensor& x, const Pool2dOptions& options) {
  // x's halo windows when H or W is sharded: the gradient reuses them (the backward pass only
  // exchanges the adjoint).
  std::shared_ptr<const SavedWindows> windows;
  return recorded(
      {&x}, [&] { return max_pool2d_forward(x, options, &windows); },
      [&](const DTensor&) {
        return [x, options, windows](const DTensor& g) -> Grads {
          return {max_pool2d_backprop(x, g, options, windows.get())};
        };
      });
}

DTensor avg_pool2d(const DTensor& x, const Pool2dOptions& options) {
  return recorded(
      {&x}, [&] { return avg_pool2d_forward(x, options); },
      [&](const DTensor&) {
        return [shape = x.shape(), options](const DTensor& g) -> Grads {
          return {avg_pool2d_backprop(shape, g, options)};
        };
      });
}

}  // namespace dtensor
