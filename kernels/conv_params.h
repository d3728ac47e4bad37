// The geometry of the CNN kernels (convolution, pooling, local response normalisation) as the
// kernel front (kernels/kernels.h) takes it: plain values, every padding already resolved to
// explicit element counts by the op layer (ops/conv.cc, ops/pooling.cc), so that a kernel only
// walks indices. Shared by every backend; no state.
//
// Layouts are TF's: activations NHWC [n, h, w, c], filters HWIO [kh, kw, c / groups, o].
// Output positions along a spatial dim: (in + pad_before + pad_after - ((k - 1) * dilation + 1))
// / stride + 1, which must be >= 1; every step checked for int64 overflow (conv_output_size).
#pragma once

#include <cstdint>

namespace dtensor::kernels {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // Input and output channels split into this many independent groups (depthwise: groups == c).
  int64_t groups = 1;
  // > 0: the threads a library-backed kernel (oneDNN) may use on the calling thread; 0: one.
  int threads = 0;
  // bf16 operands only: the result (y, dx or dw) in f32 straight from the f32 accumulator instead
  // of rounded to bf16 (mixed precision: no bf16 round trip and no separate widening pass).
  bool f32_output = false;
};

// Every extent of one convolution x [n,h,w,c] * w [kh,kw,cpg,o] -> y [n,oh,ow,o], cpg = c / groups:
// what checks::conv_geometry (kernels/checks.h) returns once it has checked them.
struct ConvGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // x
  int64_t kh = 0, kw = 0, cpg = 0;     // w: [kh, kw, cpg, o], cpg = c / groups
  int64_t o = 0, oh = 0, ow = 0;       // y: [n, oh, ow, o]
  int64_t groups = 1;
};

struct Pool2dParams {
  int64_t window_h = 1, window_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  // Padded positions never count: max ignores them, avg divides by the unpadded count (TF).
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int threads = 0;
};

// TF's tf.nn.local_response_normalization over the last (channel) dim:
//   y[c] = x[c] / (bias + alpha * sum_{|c' - c| <= depth_radius} x[c']^2)^beta
// alpha is not divided by the window size (oneDNN's convention differs by that factor).
struct LrnParams {
  int64_t depth_radius = 5;
  double bias = 1.0;
  double alpha = 1.0;
  double beta = 0.5;
};

// Checked geometry: huge paddings, dilations or windows (near 2^62) must not overflow int64.
// Each returns false, leaving *out unspecified, when the exact result does not fit.
//
// The extent of an input dim of `in` elements with `before` and `after` padding.
inline bool padded_size(int64_t in, int64_t before, int64_t after, int64_t* out) {
  return !__builtin_add_overflow(in, before, out) && !__builtin_add_overflow(*out, after, out);
}
// The span of a window of k taps, `dilation` apart: (k - 1) * dilation + 1.
inline bool window_span(int64_t k, int64_t dilation, int64_t* out) {
  return !__builtin_sub_overflow(k, 1, out) && !__builtin_mul_overflow(*out, dilation, out) &&
         !__builtin_add_overflow(*out, 1, out);
}

// What conv_output_size returns when the padded extent or the window's span overflows int64.
inline constexpr int64_t kOutputSizeOverflow = -1;

// The output positions along one spatial dim: 0 when the window does not fit (also for a
// stride < 1), kOutputSizeOverflow when padded_size or window_span does not fit in int64.
inline int64_t conv_output_size(int64_t in, int64_t pad_before, int64_t pad_after, int64_t k,
                                int64_t dilation, int64_t stride) {
  int64_t padded = 0, span = 0;
  if (!padded_size(in, pad_before, pad_after, &padded) || !window_span(k, dilation, &span)) {
    return kOutputSizeOverflow;
  }
  // Both operands of the subtraction are in int64's range, so only a negative padded size with a
  // huge span could overflow it: that window does not fit either.
  int64_t room = 0;
  if (__builtin_sub_overflow(padded, span, &room) || room < 0 || stride < 1) return 0;
  return room / stride + 1;
}

}  // namespace dtensor::kernels
