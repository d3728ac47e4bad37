// conv2d and its two gradients on the CPU (checked by the front: checks::conv2d and its
// gradients' checks, kernels/checks.h). bf16 runs natively on oneDNN (bf16 products, f32
// accumulation; the result in bf16, or in f32 with Conv2dParams::f32_output) when oneDNN has an
// optimised kernel for it; otherwise, as on an AVX2-only CPU, on f32 copies of the operands. f32
// runs on oneDNN (conv_onednn.h) when it takes the geometry; f64 (and any f32 geometry oneDNN
// refuses) on the direct loops (conv_direct.h).
#include <cstring>

#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::ConvGeometry;
using internal::ConvPass;

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

// The direct loop of `pass` on f32 or f64 operands; the filter gradient accumulates f32 in f64.
template <typename T, typename FilterAcc>
void direct(ConvPass pass, const Tensor& a, const Tensor& b, Tensor& out, const ConvGeometry& g,
            const Conv2dParams& p) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  switch (pass) {
    case ConvPass::kForward:
      return internal::conv2d_direct<T, T>(pa, pb, out.data<T>(), g, p);
    case ConvPass::kBackwardData:
      return internal::conv2d_backprop_input_direct<T, T>(pa, pb, out.data<T>(), g, p);
    case ConvPass::kBackwardWeights:
      return internal::conv2d_backprop_filter_direct<T, FilterAcc>(pa, pb, out.data<T>(), g, p);
  }
}

// out = pass(a, b) of `out_shape`: in a's dtype, or f32 for bf16 operands with f32_output.
Tensor convolve(ConvPass pass, const Tensor& a, const Tensor& b, const Shape& out_shape,
                const ConvGeometry& g, const Conv2dParams& p) {
  const DType out_dtype = p.f32_output ? DType::kF32 : a.dtype();
  // No output positions, or no output channels: nothing is summed (zeros, or an empty result).
  if (g.n * g.oh * g.ow * g.o == 0 || num_elements(out_shape) == 0) {
    return Tensor::zeros(out_shape, out_dtype, a.device());
  }
  const Conv2dParams budget = with_thread_budget(p, g);
  if (a.dtype() == DType::kBF16) {
    Tensor out = Tensor::empty(out_shape, out_dtype, a.device());
    if (internal::onednn_conv(pass, a, b, out, g, budget)) return out;
  }
  // f32 (bf16 widened exactly: the products are the same, summed in f32) or f64.
  const Tensor a_wide = as_f32(a), b_wide = as_f32(b);
  // The gradients' direct loops accumulate into a zero-filled result; the forward one writes all.
  Tensor out = pass == ConvPass::kForward ? Tensor::empty(out_shape, a_wide.dtype(), a.device())
                                          : Tensor::zeros(out_shape, a_wide.dtype(), a.device());
  if (a_wide.dtype() == DType::kF64) {
    direct<double, double>(pass, a_wide, b_wide, out, g, p);
  } else if (!internal::onednn_conv(pass, a_wide, b_wide, out, g, budget)) {
    direct<float, double>(pass, a_wide, b_wide, out, g, p);
  }
  return out_dtype == DType::kBF16 ? internal::f32_to_bf16(out) : out;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  // Checked by the front (checks::conv2d); the geometry again, for its extents.
  const ConvGeometry g = checks::conv_geometry("conv2d", x.shape(), w.shape(), p);
  return convolve(ConvPass::kForward, x, w, {g.n, g.oh, g.ow, g.o}, g, p);
}

Tensor conv2d_bias(const Tensor& x, const Tensor& w, const Tensor& bias,
                   std::optional<UnaryOp> activation, const Conv2dParams& p) {
  const ConvGeometry g = checks::conv_geometry("conv2d_bias", x.shape(), w.shape(), p);
  const bool relu = activation == UnaryOp::kRelu;
  if (x.dtype() != DType::kF64 && g.n * g.oh * g.ow * g.o * g.cpg > 0) {
    Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.o}, bias.dtype(), x.device());
    if (internal::onednn_conv(ConvPass::kForward, x, w, y, g, with_thread_budget(p, g),
                              {&bias, relu})) {
      return relu || !activation ? y : unary(*activation, y);
    }
  }
  // f64, no output or no input channels, or no oneDNN kernel: the steps one after the other.
  const Tensor y = binary(BinaryOp::kAdd, conv2d(x, w, p), bias);
  return activation ? unary(*activation, y) : y;
}

Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                             const Conv2dParams& p) {
  const ConvGeometry g = checks::conv_geometry("conv2d_backprop_input", x_shape, w.shape(), p);
  return convolve(ConvPass::kBackwardData, w, dy, x_shape, g, p);
}

Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                              const Conv2dParams& p) {
  const ConvGeometry g = checks::conv_geometry("conv2d_backprop_filter", x.shape(), w_shape, p);
  return convolve(ConvPass::kBackwardWeights, x, dy, w_shape, g, p);
}

}  // namespace dtensor::kernels::cpu
