// The conv family: conv2d and its two gradients, each an op of its own with its own letters
// (the VJP of one is the others). NHWC activations, HWIO filters.
//
// Letters, groups == 1: x [N, H, W, C], w [kh, kw, C, O], y [N, H', W', O]; C is contracted, so
// a C sharded on both operands makes y a partial sum (reduced where a consumer needs it), an O
// sharded on w gives y sharded on channels, and N sharded is data parallel with no communication.
// With groups > 1 the channels of x, the filter's O and y's channels share one letter (whole
// groups per device) when every mesh dim splits the groups and channels evenly; otherwise they
// stay whole. The filter's kh and kw are always whole; H and W follow plan_*_spatial below.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "kernels/kernels.h"
#include "ops/halo_expand.h"
#include "ops/halo_window.h"
#include "ops/op_internal.h"
#include "ops/ops.h"
#include "ops/precision.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

// Letters of the family (kH and kW are for a spatial plan that keeps H and W sharded).
constexpr int kN = 0, kH = 1, kW = 2, kC = 3, kO = 4, kG = 5;

// ---- Geometry ---------------------------------------------------------------------------------

std::string padding_string(const Padding2d& p) {
  switch (p.kind) {
    case Padding2d::kValid:
      return "VALID";
    case Padding2d::kSame:
      return "SAME";
    case Padding2d::kExplicit:
      break;
  }
  return fmt::format("{},{},{},{}", p.top, p.bottom, p.left, p.right);
}

// (before, after) padding of one spatial dim under `padding` (TF's SAME: the odd one after), for
// a window spanning `span` >= 1 input positions (kernels::window_span). No step overflows: SAME's
// (out - 1) * stride is below `in`.
std::pair<int64_t, int64_t> resolve_padding(const Padding2d& padding, bool along_h, int64_t in,
                                            int64_t span, int64_t stride) {
  switch (padding.kind) {
    case Padding2d::kValid:
      break;
    case Padding2d::kSame: {
      const int64_t out = in / stride + (in % stride != 0 ? 1 : 0);
      const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
      return {total / 2, total - total / 2};
    }
    case Padding2d::kExplicit:
      return along_h ? std::make_pair(padding.top, padding.bottom)
                     : std::make_pair(padding.left, padding.right);
  }
  return {0, 0};
}

struct ConvShapes {
  kernels::Conv2dParams params;
  Shape out;  // [n, oh, ow, o]
};

// Checks x (of `x_shape`, named `x_name`) and w against `options` and returns the kernel
// parameters and y's shape. Errors name `op`, and dy too where the op takes one (`dy_name`).
ConvShapes conv_shapes(const char* op, const Shape& x_shape, const std::string& x_name,
                       const Shape& w_shape, const std::string& w_name,
                       const Conv2dOptions& options, const std::string& dy_name = "") {
  if (x_shape.size() != 4 || w_shape.size() != 4) {
    throw_error<ShapeError>(op, "x {} must be [n,h,w,c] and the filter {} [kh,kw,c/groups,o]",
                            x_name, w_name);
  }
  const auto& s = options.strides;
  const auto& d = options.dilations;
  if (s[0] < 1 || s[1] < 1)
    throw_error<InvalidArgumentError>(op, "strides must be >= 1, got {}x{}", s[0], s[1]);
  if (d[0] < 1 || d[1] < 1) {
    throw_error<InvalidArgumentError>(op, "dilations must be >= 1, got {}x{}", d[0], d[1]);
  }
  const Padding2d& p = options.padding;
  if (p.kind == Padding2d::kExplicit && (p.top < 0 || p.bottom < 0 || p.left < 0 || p.right < 0)) {
    throw_error<InvalidArgumentError>(op, "explicit paddings must be >= 0, got {},{},{},{}", p.top,
                                      p.bottom, p.left, p.right);
  }
  const int64_t c = x_shape[3], o = w_shape[3], groups = options.groups;
  if (groups < 1 || c % groups != 0 || o % groups != 0) {
    throw_error<InvalidArgumentError>(
        op,
        "groups {} must be >= 1 and divide the input channels of x {} and the output channels "
        "of the filter {}",
        groups, x_name, w_name);
  }
  // A filter with a zero dim has no taps or no channels: nothing to convolve, and a zero output
  // channel count per group (o / groups) would divide the sharded expansions by zero (issue 25).
  if (w_shape[0] < 1 || w_shape[1] < 1 || w_shape[2] < 1 || o < 1) {
    throw_error<ShapeError>(
        op,
        "the filter {} must have at least one tap and one channel in and out per group "
        "(kh, kw, c/groups and o >= 1); x {} has {} channels in {} groups{}",
        w_name, x_name, c, groups, dy_name.empty() ? "" : ", dy " + dy_name);
  }
  int64_t filter_channels = 0;
  const bool channels_overflow = __builtin_mul_overflow(w_shape[2], groups, &filter_channels);
  if (channels_overflow || filter_channels != c) {
    throw_error<ShapeError>(
        op, "x {} has {} channels but the filter {} expects {} per group x {} groups = {}", x_name,
        c, w_name, w_shape[2], groups,
        channels_overflow ? std::string("more than int64 holds") : std::to_string(filter_channels));
  }
  int64_t span_h = 0, span_w = 0, padded_h = 0, padded_w = 0;
  auto overflow = [&] {
    throw_error<InvalidArgumentError>(
        op,
        "x {} with padding {} or the {}x{} filter {} with dilations {}x{} is larger than int64 "
        "holds",
        x_name, padding_string(p), w_shape[0], w_shape[1], w_name, d[0], d[1]);
  };
  if (!kernels::window_span(w_shape[0], d[0], &span_h) ||
      !kernels::window_span(w_shape[1], d[1], &span_w)) {
    overflow();
  }
  ConvShapes r;
  kernels::Conv2dParams& k = r.params;
  k.stride_h = s[0], k.stride_w = s[1], k.dilation_h = d[0], k.dilation_w = d[1];
  k.groups = groups;
  std::tie(k.pad_top, k.pad_bottom) = resolve_padding(p, true, x_shape[1], span_h, s[0]);
  std::tie(k.pad_left, k.pad_right) = resolve_padding(p, false, x_shape[2], span_w, s[1]);
  if (!kernels::padded_size(x_shape[1], k.pad_top, k.pad_bottom, &padded_h) ||
      !kernels::padded_size(x_shape[2], k.pad_left, k.pad_right, &padded_w)) {
    overflow();
  }
  const int64_t oh =
      kernels::conv_output_size(x_shape[1], k.pad_top, k.pad_bottom, w_shape[0], d[0], s[0]);
  const int64_t ow =
      kernels::conv_output_size(x_shape[2], k.pad_left, k.pad_right, w_shape[1], d[1], s[1]);
  if (oh < 1 || ow < 1) {
    throw_error<ShapeError>(op,
                            "the {}x{} filter (dilations {}x{}) does not fit x {} padded to {}x{}",
                            w_shape[0], w_shape[1], d[0], d[1], x_name, padded_h, padded_w);
  }
  r.out = {x_shape[0], oh, ow, o};
  return r;
}

void check_float(const char* op, const DTensor& t) {
  if (!is_floating(t.dtype())) {
    throw_error<DTypeError>(op, "{} must be f32, f64 or bf16", t.short_string());
  }
}

void check_dy(const char* op, const DTensor& dy, const Shape& want) {
  if (dy.shape() != want) {
    throw_error<ShapeError>(op, "dy {} must be {}, the output shape of the convolution",
                            dy.short_string(), shape_to_string(want));
  }
}

// The result's dtype: the operands', or f32 for bf16 operands with f32_output (the mixed policy).
DType result_dtype(const DTensor& operand, const kernels::Conv2dParams& p) {
  return p.f32_output ? DType::kF32 : operand.dtype();
}

double conv_flops(const Shape& out, const Shape& w_shape) {
  return 2.0 * static_cast<double>(num_elements(out)) * static_cast<double>(w_shape[0]) *
         static_cast<double>(w_shape[1]) * static_cast<double>(w_shape[2]);
}

// Whether whole groups may be sharded: every mesh dim splits the groups and both channel counts
// evenly, so that each device's channel slice holds whole groups.
bool groups_shardable(const Mesh& mesh, int64_t groups, int64_t c, int64_t o) {
  if (groups == 1) return false;
  for (const MeshDim& dim : mesh.dims()) {
    const int64_t k = dim.size;
    if (groups % k != 0 || c % k != 0 || o % k != 0) return false;
  }
  return true;
}

// The channel letters: (x's channels, the filter's third dim, the filter's and y's O).
struct ChannelLetters {
  int in, filter_in, out;
};
ChannelLetters channel_letters(const Mesh& mesh, int64_t groups, int64_t c, int64_t o) {
  if (groups == 1) return {kC, kC, kO};
  if (groups_shardable(mesh, groups, c, o)) return {kG, kBroadcastDim, kG};
  return {kBroadcastDim, kBroadcastDim, kBroadcastDim};
}

// The kernel parameters for one device's shards: its share of the groups (whole groups per
// device, found from its output channels o_local; opg = o / groups, cpg = c / groups globally)
// and the thread budget of ops/expand.h.
kernels::Conv2dParams local_params(kernels::Conv2dParams p, int64_t o_local, int64_t opg) {
  if (p.groups > 1 && opg > 0) p.groups = o_local / opg;
  p.threads = local_blas_threads();
  return p;
}

// ---- Spatial sharding: the one decision per op that halo exchange replaces ---------------------
//
// How an op treats a sharded H or W. kGather keeps both whole (their letters kBroadcastDim): the
// path of every op whose activations are not spatially sharded. kHalo keeps them sharded (the
// output's H and W chunked by the output size on the same mesh dims) and exchanges the rows each
// shard's windows need from its neighbours: one halo exchange per sharded spatial dim, the
// adjoint one for the input gradient, none for batch or channel sharding (ops/README.md).
enum class SpatialPlan { kGather, kHalo };

bool spatially_sharded(const DTensor& t) {
  return t.rank() == 4 && (t.layout().is_sharded(1) || t.layout().is_sharded(2));
}

SpatialPlan plan_conv2d_spatial(const DTensor& x, const kernels::Conv2dParams& /*params*/) {
  return spatially_sharded(x) ? SpatialPlan::kHalo : SpatialPlan::kGather;
}
SpatialPlan plan_conv2d_backprop_input_spatial(const DTensor& dy,
                                               const kernels::Conv2dParams& /*params*/) {
  return spatially_sharded(dy) ? SpatialPlan::kHalo : SpatialPlan::kGather;
}
SpatialPlan plan_conv2d_backprop_filter_spatial(const DTensor& x, const DTensor& dy,
                                                const kernels::Conv2dParams& /*params*/) {
  return spatially_sharded(x) || spatially_sharded(dy) ? SpatialPlan::kHalo : SpatialPlan::kGather;
}

// The windows of a conv over an input of `x_layout` and `x_shape` with output `out`.
HaloWindow2d conv_windows(const Layout& x_layout, const Shape& x_shape, const Shape& w_shape,
                          const Shape& out, const kernels::Conv2dParams& p) {
  return HaloWindow2d(x_layout, x_shape, out[1], out[2],
                      WindowDim{w_shape[0], p.stride_h, p.dilation_h, p.pad_top},
                      WindowDim{w_shape[1], p.stride_w, p.dilation_w, p.pad_left});
}

// The kernel parameters of local device i on its extended window.
kernels::Conv2dParams halo_params(kernels::Conv2dParams p, const HaloWindow2d& window, size_t i,
                                  int64_t o_local, int64_t opg) {
  p = local_params(p, o_local, opg);
  const LocalPadding pad = window.local_padding(i);
  p.pad_top = pad.top, p.pad_bottom = pad.bottom, p.pad_left = pad.left, p.pad_right = pad.right;
  return p;
}

std::string halo_attributes(const Conv2dOptions& options) {
  return options.groups > 1 ? "g,halo" : "halo";
}

// `save`: where to keep x's extended windows for the filter gradient (null: nowhere).
DTensor conv2d_halo(const DTensor& x, const DTensor& w, const ConvShapes& shapes,
                    const Conv2dOptions& options, std::shared_ptr<const SavedWindows>* save) {
  const ChannelLetters ch = channel_letters(x.mesh(), options.groups, x.shape()[3], w.shape()[3]);
  OpSignature sig{
      "conv2d",
      halo_attributes(options),
      {{{kN, kH, kW, ch.in}, true}, {{kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out}, true}},
      {kN, kH, kW, ch.out},
      Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&x, &w});
  const DTensor& xs = in.inputs[0];
  const DTensor& ws = in.inputs[1];
  const Layout& out_layout = in.decision->output;
  const HaloWindow2d window =
      conv_windows(xs.layout(), x.shape(), w.shape(), shapes.out, shapes.params);
  const std::vector<Tensor> ext = window.extend(xs.shards());
  if (save) *save = std::make_shared<const SavedWindows>(SavedWindows{xs.layout(), ext});
  const int64_t opg = w.shape()[3] / options.groups;
  const auto& ids = x.mesh().local_device_ids();
  const DType dtype = result_dtype(x, shapes.params);
  std::vector<Tensor> y = run_per_device(
      x.mesh(), dtype, [&](size_t i) { return out_layout.shard_shape(shapes.out, ids[i]); },
      [&](size_t i) { return ext[i].num_elements() > 0; },
      [&](size_t i) {
        const Tensor& wi = ws.shard(static_cast<int64_t>(i));
        return kernels::conv2d(ext[i], wi, halo_params(shapes.params, window, i, wi.dim(3), opg));
      });
  return DTensor::from_trusted_shards(shapes.out, dtype, out_layout, std::move(y));
}

DTensor conv2d_backprop_input_halo(const Shape& input_shape, const DTensor& w, const DTensor& dy,
                                   const ConvShapes& shapes, const Conv2dOptions& options) {
  const ChannelLetters ch = channel_letters(w.mesh(), options.groups, input_shape[3], w.shape()[3]);
  OpSignature sig{
      "conv2d_backprop_input",
      halo_attributes(options),
      {{{kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out}, true}, {{kN, kH, kW, ch.out}, true}},
      {kN, kH, kW, ch.in},
      Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&w, &dy});
  const DTensor& ws = in.inputs[0];
  const DTensor& dys = in.inputs[1];
  const Layout& out_layout = in.decision->output;
  // The windows of the input the gradient is for: its layout is the result's.
  const HaloWindow2d window =
      conv_windows(out_layout, input_shape, w.shape(), shapes.out, shapes.params);
  const int64_t opg = w.shape()[3] / options.groups;
  auto ext_shape = [&](size_t i) {
    const Tensor& wi = ws.shard(static_cast<int64_t>(i));
    const int64_t groups = options.groups > 1 ? wi.dim(3) / opg : 1;
    return window.extended_shape(i, dys.shard(static_cast<int64_t>(i)).dim(0), wi.dim(2) * groups);
  };
  const DType dtype = result_dtype(w, shapes.params);
  std::vector<Tensor> dext = run_per_device(
      w.mesh(), dtype, ext_shape,
      [&](size_t i) { return dys.shard(static_cast<int64_t>(i)).num_elements() > 0; },
      [&](size_t i) {
        const Tensor& wi = ws.shard(static_cast<int64_t>(i));
        return kernels::conv2d_backprop_input(
            ext_shape(i), wi, dys.shard(static_cast<int64_t>(i)),
            halo_params(shapes.params, window, i, wi.dim(3), opg));
      });
  return DTensor::from_trusted_shards(input_shape, dtype, out_layout, window.extend_adjoint(dext));
}

// `saved`: x's windows from the forward pass, used when x has the layout they were made in.
DTensor conv2d_backprop_filter_halo(const DTensor& x, const Shape& filter_shape, const DTensor& dy,
                                    const ConvShapes& shapes, const Conv2dOptions& options,
                                    const SavedWindows* saved) {
  const ChannelLetters ch =
      channel_letters(x.mesh(), options.groups, x.shape()[3], filter_shape[3]);
  // N, H and W are contracted: the filter gradient is a partial sum over their mesh dims.
  OpSignature sig{"conv2d_backprop_filter",
                  halo_attributes(options),
                  {{{kN, kH, kW, ch.in}, true}, {{kN, kH, kW, ch.out}, true}},
                  {kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out},
                  Linearity::kMultilinear};
  const WindowInputs in = decide_window_inputs(sig, {&x, &dy});
  const DTensor& xs = in.inputs[0];
  const DTensor& dys = in.inputs[1];
  const Layout& out_layout = in.decision->output;
  const HaloWindow2d window =
      conv_windows(xs.layout(), x.shape(), filter_shape, shapes.out, shapes.params);
  const std::vector<Tensor> ext =
      saved && saved->layout == xs.layout() ? saved->windows : window.extend(xs.shards());
  const int64_t opg = filter_shape[3] / options.groups;
  const auto& ids = x.mesh().local_device_ids();
  const DType dtype = result_dtype(x, shapes.params);
  std::vector<Tensor> dw = run_per_device(
      x.mesh(), dtype, [&](size_t i) { return out_layout.shard_shape(filter_shape, ids[i]); },
      [&](size_t i) {
        return ext[i].num_elements() > 0 && dys.shard(static_cast<int64_t>(i)).num_elements() > 0;
      },
      [&](size_t i) {
        const Tensor& dyi = dys.shard(static_cast<int64_t>(i));
        const Shape w_local = out_layout.shard_shape(filter_shape, ids[i]);
        return kernels::conv2d_backprop_filter(
            ext[i], w_local, dyi, halo_params(shapes.params, window, i, dyi.dim(3), opg));
      });
  return DTensor::from_trusted_shards(filter_shape, dtype, out_layout, std::move(dw));
}

// H and W letters of an activation under kGather.
constexpr int kWholeH = kBroadcastDim, kWholeW = kBroadcastDim;

// ---- conv2d ------------------------------------------------------------------------------------

// conv2d's checks of its operands; the kernel parameters and y's shape.
ConvShapes checked_conv2d(const DTensor& x, const DTensor& w, const Conv2dOptions& options) {
  check_same_mesh("conv2d", {&x, &w});
  check_float("conv2d", x);
  check_same_dtype("conv2d", x, w);
  return conv_shapes("conv2d", x.shape(), x.short_string(), w.shape(), w.short_string(), options);
}

// `f32_output` (bf16 operands, the mixed policy): the f32 sums as they are, here and in the two
// gradients below.
DTensor conv2d_forward(const DTensor& x, const DTensor& w, const Conv2dOptions& options,
                       std::shared_ptr<const SavedWindows>* save = nullptr,
                       bool f32_output = false) {
  ConvShapes shapes = checked_conv2d(x, w, options);
  shapes.params.f32_output = f32_output;
  switch (plan_conv2d_spatial(x, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return conv2d_halo(x, w, shapes, options, save);
  }
  const ChannelLetters ch = channel_letters(x.mesh(), options.groups, x.shape()[3], w.shape()[3]);
  OpSignature sig{"conv2d",
                  options.groups > 1 ? "g" : "",
                  {{{kN, kWholeH, kWholeW, ch.in}, true},
                   {{kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out}, true}},
                  {kN, kWholeH, kWholeW, ch.out},
                  Linearity::kMultilinear};
  const kernels::Conv2dParams params = shapes.params;
  const int64_t opg = w.shape()[3] / options.groups;
  return expand(sig, {&x, &w}, shapes.out, result_dtype(x, params),
                conv_flops(shapes.out, w.shape()), [params, opg](const Shards& s) {
                  return kernels::conv2d(s[0], s[1], local_params(params, s[1].shape()[3], opg));
                });
}

DTensor conv2d_backprop_input_forward(const Shape& input_shape, const DTensor& w, const DTensor& dy,
                                      const Conv2dOptions& options, bool f32_output = false) {
  check_same_mesh("conv2d_backprop_input", {&w, &dy});
  check_float("conv2d_backprop_input", w);
  check_same_dtype("conv2d_backprop_input", w, dy);
  ConvShapes shapes =
      conv_shapes("conv2d_backprop_input", input_shape, shape_to_string(input_shape), w.shape(),
                  w.short_string(), options, dy.short_string());
  shapes.params.f32_output = f32_output;
  check_dy("conv2d_backprop_input", dy, shapes.out);
  switch (plan_conv2d_backprop_input_spatial(dy, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return conv2d_backprop_input_halo(input_shape, w, dy, shapes, options);
  }
  const ChannelLetters ch = channel_letters(w.mesh(), options.groups, input_shape[3], w.shape()[3]);
  // O is contracted (groups == 1); the result's channels take x's letter.
  OpSignature sig{"conv2d_backprop_input",
                  options.groups > 1 ? "g" : "",
                  {{{kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out}, true},
                   {{kN, kWholeH, kWholeW, ch.out}, true}},
                  {kN, kWholeH, kWholeW, ch.in},
                  Linearity::kMultilinear};
  const kernels::Conv2dParams params = shapes.params;
  const int64_t opg = w.shape()[3] / options.groups;
  const Shape whole = input_shape;
  return expand(
      sig, {&w, &dy}, input_shape, result_dtype(w, params), conv_flops(shapes.out, w.shape()),
      [params, opg, whole](const Shards& s) {
        const kernels::Conv2dParams local = local_params(params, s[0].shape()[3], opg);
        // This device's batch rows and channels of x (whole groups with groups > 1).
        const Shape x_local = {s[1].shape()[0], whole[1], whole[2], s[0].shape()[2] * local.groups};
        return kernels::conv2d_backprop_input(x_local, s[0], s[1], local);
      });
}

DTensor conv2d_backprop_filter_forward(const DTensor& x, const Shape& filter_shape,
                                       const DTensor& dy, const Conv2dOptions& options,
                                       const SavedWindows* saved = nullptr,
                                       bool f32_output = false) {
  check_same_mesh("conv2d_backprop_filter", {&x, &dy});
  check_float("conv2d_backprop_filter", x);
  check_same_dtype("conv2d_backprop_filter", x, dy);
  ConvShapes shapes =
      conv_shapes("conv2d_backprop_filter", x.shape(), x.short_string(), filter_shape,
                  shape_to_string(filter_shape), options, dy.short_string());
  shapes.params.f32_output = f32_output;
  check_dy("conv2d_backprop_filter", dy, shapes.out);
  switch (plan_conv2d_backprop_filter_spatial(x, dy, shapes.params)) {
    case SpatialPlan::kGather:
      break;
    case SpatialPlan::kHalo:
      return conv2d_backprop_filter_halo(x, filter_shape, dy, shapes, options, saved);
  }
  const ChannelLetters ch =
      channel_letters(x.mesh(), options.groups, x.shape()[3], filter_shape[3]);
  // N (and H, W) are contracted: a batch-sharded x and dy give a partial-sum filter gradient.
  OpSignature sig{"conv2d_backprop_filter",
                  options.groups > 1 ? "g" : "",
                  {{{kN, kWholeH, kWholeW, ch.in}, true}, {{kN, kWholeH, kWholeW, ch.out}, true}},
                  {kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out},
                  Linearity::kMultilinear};
  const kernels::Conv2dParams params = shapes.params;
  const int64_t opg = filter_shape[3] / options.groups;
  const Shape whole = filter_shape;
  // The sum over N is batch-invariant (ops/expand.h): towers get one device's bits.
  const double flops = conv_flops(shapes.out, filter_shape);
  Stacking stacking;
  stacking.contraction_axes = {0, 0};
  stacking.chunk_rows = invariant_chunk_rows(x.shape()[0], flops);
  return expand(
      sig, {&x, &dy}, filter_shape, result_dtype(x, params), flops,
      [params, opg, whole](const Shards& s) {
        const kernels::Conv2dParams local = local_params(params, s[1].shape()[3], opg);
        const Shape w_local = {whole[0], whole[1], params.groups == 1 ? s[0].shape()[3] : whole[2],
                               s[1].shape()[3]};
        return kernels::conv2d_backprop_filter(s[0], w_local, s[1], local);
      },
      stacking);
}

// activation(conv2d(x, w) + b): one conv2d_bias kernel per shard, unless the layouts make the
// convolution partial or spatially sharded: then conv2d_forward, add and the activation.
DTensor conv2d_bias_forward(const DTensor& x, const DTensor& w, const DTensor& b,
                            DenseActivation activation, const Conv2dOptions& options,
                            std::shared_ptr<const SavedWindows>* save, bool f32_output) {
  ConvShapes shapes = checked_conv2d(x, w, options);
  shapes.params.f32_output = f32_output;
  check_same_mesh("conv2d", {&x, &b});
  const DType out = result_dtype(x, shapes.params);
  const int64_t o = w.shape()[3];
  if (b.dtype() != out || b.shape() != Shape{o}) {
    const std::string message =
        fmt::format("the bias {} must be {}[{}] for x {} and the filter {}", b.short_string(),
                    dtype_name(out), o, x.short_string(), w.short_string());
    if (b.dtype() != out) throw_error<DTypeError>("conv2d", "{}", message);
    throw_error<ShapeError>("conv2d", "{}", message);
  }
  const bool relu = activation == DenseActivation::kRelu;
  const ChannelLetters ch = channel_letters(x.mesh(), options.groups, x.shape()[3], o);
  OpSignature sig{"conv2d",
                  std::string(options.groups > 1 ? "g," : "") + (relu ? "bias,relu" : "bias"),
                  {{{kN, kWholeH, kWholeW, ch.in}, false},
                   {{kBroadcastDim, kBroadcastDim, ch.filter_in, ch.out}, false},
                   {{ch.out}, false}},
                  {kN, kWholeH, kWholeW, ch.out},
                  Linearity::kNone};
  // The bias and the activation must wait for a partial sum, and the halo path has no fused kernel.
  if (spatially_sharded(x) || decide_sharding(sig, {&x, &w, &b})->output.is_partial()) {
    const DTensor y = add(conv2d_forward(x, w, options, save, f32_output), b);
    return relu ? dtensor::relu(y) : y;
  }
  const kernels::Conv2dParams params = shapes.params;
  const int64_t opg = o / options.groups;
  const std::optional<kernels::UnaryOp> act =
      relu ? std::optional<kernels::UnaryOp>(kernels::UnaryOp::kRelu) : std::nullopt;
  return expand(sig, {&x, &w, &b}, shapes.out, out, conv_flops(shapes.out, w.shape()),
                [params, opg, act](const Shards& s) {
                  return kernels::conv2d_bias(s[0], s[1], s[2], act,
                                              local_params(params, s[1].shape()[3], opg));
                });
}

// conv2d's gradients for x and w (the first two of `n`) from the output gradient g, through the
// recorded ops (gradients of gradients), the filter gradient on x's saved halo windows if any.
Grads conv_grads(const DTensor& g, const DTensor& x, const DTensor& w, const Conv2dOptions& options,
                 const std::shared_ptr<const SavedWindows>& windows, size_t n) {
  Grads grads(n);
  if (gradient_needed(0)) grads[0] = conv2d_backprop_input(x.shape(), w, g, options);
  if (gradient_needed(1)) {
    grads[1] = windows ? unrecorded([&] {
      return conv2d_backprop_filter_forward(x, w.shape(), g, options, windows.get());
    })
                       : conv2d_backprop_filter(x, w.shape(), g, options);
  }
  return grads;
}

// The mixed form: g cast to bf16 once, both gradients f32 from bf16 convolutions of x16 and w16.
Grads mixed_conv_grads(const DTensor& g, const DTensor& x16, const DTensor& w16,
                       const Conv2dOptions& options,
                       const std::shared_ptr<const SavedWindows>& windows, size_t n) {
  const DTensor g16 = precision_internal::bf16_operand(g);
  Grads grads(n);
  if (gradient_needed(0)) {
    grads[0] = conv2d_backprop_input_forward(x16.shape(), w16, g16, options, true);
  }
  if (gradient_needed(1)) {
    grads[1] = conv2d_backprop_filter_forward(x16, w16.shape(), g16, options, windows.get(), true);
  }
  return grads;
}

// The gradient before the activation: g where the ReLU let the value through.
DTensor before_activation(const DTensor& g, const DTensor& y, DenseActivation activation) {
  return activation == DenseActivation::kRelu ? mul(g, relu_mask(y)) : g;
}

}  // namespace

DTensor conv2d(const DTensor& x, const DTensor& w, const Conv2dOptions& options) {
  if (precision_internal::runs_mixed(x, w)) return precision_internal::mixed_conv2d(x, w, options);
  // x's halo windows when H or W is sharded: the filter gradient reuses them (no second
  // exchange in the backward pass).
  std::shared_ptr<const SavedWindows> windows;
  return recorded(
      {&x, &w}, [&] { return conv2d_forward(x, w, options, &windows); },
      [&](const DTensor&) {
        return [x, w, options, windows](const DTensor& g) -> Grads {
          return conv_grads(g, x, w, options, windows, 2);
        };
      });
}

DTensor conv2d(const DTensor& x, const DTensor& w, const DTensor& b, DenseActivation activation,
               const Conv2dOptions& options) {
  if (precision_internal::runs_mixed(x, w)) {
    return precision_internal::mixed_conv2d(x, w, b, activation, options);
  }
  std::shared_ptr<const SavedWindows> windows;
  return recorded(
      {&x, &w, &b},
      [&] { return conv2d_bias_forward(x, w, b, activation, options, &windows, false); },
      [&](const DTensor& y) {
        return [x, w, sb = b.shape(), options, windows, y, activation](const DTensor& g) -> Grads {
          const DTensor gz = before_activation(g, y, activation);
          Grads grads = conv_grads(gz, x, w, options, windows, 3);
          if (gradient_needed(2)) grads[2] = sum_to(gz, sb);
          return grads;
        };
      });
}

// dx = B(w, dy) is the adjoint of x -> conv2d(x, w): <G, B(w, dy)> = <conv2d(G, w), dy>, so the
// gradient in dy is conv2d(G, w) and the one in w is the filter gradient of that conv2d.
DTensor conv2d_backprop_input(const Shape& input_shape, const DTensor& w, const DTensor& dy,
                              const Conv2dOptions& options) {
  return recorded(
      {&w, &dy}, [&] { return conv2d_backprop_input_forward(input_shape, w, dy, options); },
      [&](const DTensor&) {
        return [w, dy, options](const DTensor& g) -> Grads {
          Grads grads(2);
          if (gradient_needed(0)) grads[0] = conv2d_backprop_filter(g, w.shape(), dy, options);
          if (gradient_needed(1)) grads[1] = conv2d(g, w, options);
          return grads;
        };
      });
}

// dw = F(x, dy) satisfies <G, F(x, dy)> = <conv2d(x, G), dy>: the gradient in dy is conv2d(x, G)
// and the one in x is the input gradient of that conv2d.
DTensor conv2d_backprop_filter(const DTensor& x, const Shape& filter_shape, const DTensor& dy,
                               const Conv2dOptions& options) {
  return recorded(
      {&x, &dy}, [&] { return conv2d_backprop_filter_forward(x, filter_shape, dy, options); },
      [&](const DTensor&) {
        return [x, dy, options](const DTensor& g) -> Grads {
          Grads grads(2);
          if (gradient_needed(0)) grads[0] = conv2d_backprop_input(x.shape(), g, dy, options);
          if (gradient_needed(1)) grads[1] = conv2d(x, g, options);
          return grads;
        };
      });
}

// The mixed forms (ops/precision.h): bf16 copies of the f32 operands (the filter from the copy its
// optimizer keeps), f32 results straight from the accumulator (the f32 bias and ReLU fused in),
// the f32 gradient cast to bf16 once for the two gradient convolutions, x's halo windows (bf16)
// reused by the filter gradient.
DTensor precision_internal::mixed_conv2d(const DTensor& x, const DTensor& w,
                                         const Conv2dOptions& options) {
  checked_conv2d(x, w, options);  // errors name the caller's f32 operands, not their bf16 copies
  const DTensor x16 = bf16_operand(x), w16 = bf16_weight(w);
  std::shared_ptr<const SavedWindows> windows;
  return recorded(
      {&x, &w}, [&] { return conv2d_forward(x16, w16, options, &windows, /*f32_output=*/true); },
      [&](const DTensor&) {
        return [x16, w16, options, windows, bf16 = bf16_reduction()](const DTensor& g) -> Grads {
          return reduced_as_policy(mixed_conv_grads(g, x16, w16, options, windows, 2), bf16);
        };
      });
}

DTensor precision_internal::mixed_conv2d(const DTensor& x, const DTensor& w, const DTensor& b,
                                         DenseActivation activation, const Conv2dOptions& options) {
  checked_conv2d(x, w, options);
  const DTensor x16 = bf16_operand(x), w16 = bf16_weight(w);
  const DTensor b32 =
      b.dtype() == DType::kF32 ? b : unrecorded([&] { return cast(b, DType::kF32); });
  std::shared_ptr<const SavedWindows> windows;
  return recorded(
      {&x, &w, &b},
      [&] { return conv2d_bias_forward(x16, w16, b32, activation, options, &windows, true); },
      [&](const DTensor& y) {
        return [x16, w16, sb = b.shape(), options, windows, y, activation,
                bf16 = bf16_reduction()](const DTensor& g) -> Grads {
          const DTensor gz = before_activation(g, y, activation);
          Grads grads = mixed_conv_grads(gz, x16, w16, options, windows, 3);
          if (gradient_needed(2)) grads[2] = sum_to(gz, sb);
          return reduced_as_policy(std::move(grads), bf16);
        };
      });
}

}  // namespace dtensor
