// The geometry of the CNN kernels (convolution, pooling, local response normalisation) as the
// kernel front (kernels/kernels.h) takes it: plain values, every padding already resolved to
// explicit element counts by the op layer (ops/conv.cc, ops/pooling.cc), so that a kernel only
// walks indices. Shared by every backend; no state.
//
// Layouts are TF's: activations NHWC [n, h, w, c], filters HWIO [kh, kw, c / groups, o].
// Output positions along a spatial dim: (in + pad_before + pad_after - ((k - 1) * dilation + 1))
// / stride + 1, which must be >= 1.
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

// The output positions along one spatial dim (may be <= 0 when the window does not fit).
inline int64_t conv_output_size(int64_t in, int64_t pad_before, int64_t pad_after, int64_t k,
                                int64_t dilation, int64_t stride) {
  const int64_t span = in + pad_before + pad_after - ((k - 1) * dilation + 1);
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace dtensor::kernels
