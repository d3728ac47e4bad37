// conv2d and its two gradients on the CPU: shape checks, then f32 on oneDNN (conv_onednn.h) when
// it takes the geometry, f64 (and any f32 geometry oneDNN refuses) on the direct loops
// (conv_direct.h), bf16 through f32.
#include <cstring>

#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::ConvGeometry;
using internal::describe;

std::string shape_string(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

void check_params(const char* op, const Conv2dParams& p) {
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 || p.groups < 1 ||
      p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0) {
    throw_error<InvalidArgumentError>(
        op,
        "strides {}x{}, dilations {}x{} and groups {} must be >= 1 and paddings {},{},{},{} >= 0",
        p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, p.groups, p.pad_top, p.pad_bottom,
        p.pad_left, p.pad_right);
  }
}

// The geometry of x [n,h,w,c] * w [kh,kw,c/groups,o] -> y [n,oh,ow,o].
ConvGeometry geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  check_params(op, p);
  if (x.size() != 4 || w.size() != 4) {
    throw_error<ShapeError>(op, "x {} must be [n,h,w,c] and w {} [kh,kw,c/groups,o]",
                            shape_string(x), shape_string(w));
  }
  ConvGeometry g;
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.kh = w[0], g.kw = w[1], g.cpg = w[2], g.o = w[3];
  g.groups = p.groups;
  if (g.cpg * g.groups != g.c || g.o % g.groups != 0) {
    throw_error<ShapeError>(op, "x {} has {} channels, w {} takes {} in each of {} groups",
                            shape_string(x), g.c, shape_string(w), g.cpg, g.groups);
  }
  g.oh = conv_output_size(g.h, p.pad_top, p.pad_bottom, g.kh, p.dilation_h, p.stride_h);
  g.ow = conv_output_size(g.w, p.pad_left, p.pad_right, g.kw, p.dilation_w, p.stride_w);
  if (g.oh < 1 || g.ow < 1 || g.kh < 1 || g.kw < 1) {
    throw_error<ShapeError>(
        op, "the {}x{} window (dilation {}x{}) does not fit x {} padded by {},{},{},{}", g.kh, g.kw,
        p.dilation_h, p.dilation_w, shape_string(x), p.pad_top, p.pad_bottom, p.pad_left,
        p.pad_right);
  }
  return g;
}

void check_float_pair(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(op, "dtypes differ: {} and {}", describe(a), describe(b));
  }
  if (!is_floating(a.dtype())) internal::throw_unsupported(op, a);
}

void check_dy(const char* op, const Tensor& dy, const ConvGeometry& g) {
  if (dy.shape() != Shape{g.n, g.oh, g.ow, g.o}) {
    throw_error<ShapeError>(op, "dy {} must be [{},{},{},{}]", describe(dy), g.n, g.oh, g.ow, g.o);
  }
}

// Below this many flops a convolution runs on the calling thread alone: forking an OpenMP team
// costs more than it saves, and its workers spin afterwards, taking cores from the pool threads
// that run the other devices' kernels.
constexpr double kMinParallelFlops = 4e6;

Conv2dParams with_thread_budget(Conv2dParams p, const ConvGeometry& g) {
  const double flops =
      2.0 * static_cast<double>(g.n * g.oh * g.ow) * static_cast<double>(g.o * g.kh * g.kw * g.cpg);
  if (flops < kMinParallelFlops) p.threads = 1;
  return p;
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::kBF16 ? internal::bf16_to_f32(t) : t; }
Tensor like(const Tensor& r, DType dtype) {
  return dtype == DType::kBF16 ? internal::f32_to_bf16(r) : r;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Conv2dParams& p) {
  check_float_pair("conv2d", x_in, w_in);
  const ConvGeometry g = geometry("conv2d", x_in.shape(), w_in.shape(), p);
  const Tensor x = as_f32(x_in), w = as_f32(w_in);
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.o}, x.dtype(), x_in.device());
  if (y.num_elements() == 0) return like(y, x_in.dtype());
  if (x.dtype() == DType::kF64) {
    internal::conv2d_direct<double, double>(x.data<double>(), w.data<double>(), y.data<double>(), g,
                                            p);
  } else if (!internal::onednn_conv2d(x, w, y, g, with_thread_budget(p, g))) {
    internal::conv2d_direct<float, float>(x.data<float>(), w.data<float>(), y.data<float>(), g, p);
  }
  return like(y, x_in.dtype());
}

Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w_in, const Tensor& dy_in,
                             const Conv2dParams& p) {
  check_float_pair("conv2d_backprop_input", w_in, dy_in);
  const ConvGeometry g = geometry("conv2d_backprop_input", x_shape, w_in.shape(), p);
  check_dy("conv2d_backprop_input", dy_in, g);
  const Tensor w = as_f32(w_in), dy = as_f32(dy_in);
  Tensor dx = Tensor::zeros(x_shape, w.dtype(), w_in.device());
  if (dx.num_elements() == 0 || dy.num_elements() == 0) return like(dx, w_in.dtype());
  if (w.dtype() == DType::kF64) {
    internal::conv2d_backprop_input_direct<double, double>(w.data<double>(), dy.data<double>(),
                                                           dx.data<double>(), g, p);
  } else if (!internal::onednn_conv2d_backprop_input(w, dy, dx, g, with_thread_budget(p, g))) {
    internal::conv2d_backprop_input_direct<float, float>(w.data<float>(), dy.data<float>(),
                                                         dx.data<float>(), g, p);
  }
  return like(dx, w_in.dtype());
}

Tensor conv2d_backprop_filter(const Tensor& x_in, const Shape& w_shape, const Tensor& dy_in,
                              const Conv2dParams& p) {
  check_float_pair("conv2d_backprop_filter", x_in, dy_in);
  const ConvGeometry g = geometry("conv2d_backprop_filter", x_in.shape(), w_shape, p);
  check_dy("conv2d_backprop_filter", dy_in, g);
  const Tensor x = as_f32(x_in), dy = as_f32(dy_in);
  Tensor dw = Tensor::zeros(w_shape, x.dtype(), x_in.device());
  if (dw.num_elements() == 0 || dy.num_elements() == 0) return like(dw, x_in.dtype());
  if (x.dtype() == DType::kF64) {
    internal::conv2d_backprop_filter_direct<double, double>(x.data<double>(), dy.data<double>(),
                                                            dw.data<double>(), g, p);
  } else if (!internal::onednn_conv2d_backprop_filter(x, dy, dw, g, with_thread_budget(p, g))) {
    internal::conv2d_backprop_filter_direct<float, double>(x.data<float>(), dy.data<float>(),
                                                           dw.data<float>(), g, p);
  }
  return like(dw, x_in.dtype());
}

}  // namespace dtensor::kernels::cpu
