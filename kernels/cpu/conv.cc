// conv2d and its two gradients on the CPU (checked by the front: checks::conv2d and its
// gradients' checks, kernels/checks.h): f32 on oneDNN (conv_onednn.h) when
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
  // Checked by the front (checks::conv2d); the geometry again, for its extents.
  const ConvGeometry g = checks::conv_geometry("conv2d", x_in.shape(), w_in.shape(), p);
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
  const ConvGeometry g = checks::conv_geometry("conv2d_backprop_input", x_shape, w_in.shape(), p);
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
  const ConvGeometry g = checks::conv_geometry("conv2d_backprop_filter", x_in.shape(), w_shape, p);
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
