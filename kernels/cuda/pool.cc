// Max and average pooling, their gradients, and local response normalisation on the GPU: own
// kernels (cnn_launch.h) rather than cuDNN's, because cuDNN's pooling does not promise the CPU's
// rules (the gradient of a tied maximum to the first position of the window, NaN propagation,
// f64) and its LRN differs in definition (alpha divided by the window size, an odd window only).
// f32 and f64, bf16 through f32. The argument checks and their texts are the CPU kernels'
// (kernels/cpu/pool.cc, lrn.cc).
#include <algorithm>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

namespace {

void require_float(const char* op, const Tensor& x) {
  if (!is_floating(x.dtype())) throw_unsupported(op, x);
}

cuda_launch::PoolDims pool_dims(const char* op, const Shape& x, const Pool2dParams& p) {
  const bool bad_window = p.window_h < 1 || p.window_w < 1 || p.stride_h < 1 || p.stride_w < 1;
  const bool bad_pad = p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0 ||
                       p.pad_top >= p.window_h || p.pad_bottom >= p.window_h ||
                       p.pad_left >= p.window_w || p.pad_right >= p.window_w;
  if (bad_window || bad_pad) {
    throw_error<InvalidArgumentError>(
        op, "window {}x{} and strides {}x{} must be >= 1, paddings {},{},{},{} in [0, window)",
        p.window_h, p.window_w, p.stride_h, p.stride_w, p.pad_top, p.pad_bottom, p.pad_left,
        p.pad_right);
  }
  if (x.size() != 4) throw_error<ShapeError>(op, "x [{}] must be [n,h,w,c]", fmt::join(x, ","));
  const int64_t oh = conv_output_size(x[1], p.pad_top, p.pad_bottom, p.window_h, 1, p.stride_h);
  const int64_t ow = conv_output_size(x[2], p.pad_left, p.pad_right, p.window_w, 1, p.stride_w);
  if (oh == kOutputSizeOverflow || ow == kOutputSizeOverflow) {
    throw_error<InvalidArgumentError>(op, "x [{}] padded by {},{},{},{} is larger than int64 holds",
                                      fmt::join(x, ","), p.pad_top, p.pad_bottom, p.pad_left,
                                      p.pad_right);
  }
  if (oh < 1 || ow < 1) {
    throw_error<ShapeError>(op, "the {}x{} window does not fit x [{}] padded by {},{},{},{}",
                            p.window_h, p.window_w, fmt::join(x, ","), p.pad_top, p.pad_bottom,
                            p.pad_left, p.pad_right);
  }
  return {x[0],       x[1],       x[2],       x[3],       oh,        ow,
          p.window_h, p.window_w, p.stride_h, p.stride_w, p.pad_top, p.pad_left};
}

Shape output_shape(const cuda_launch::PoolDims& d) { return {d.n, d.oh, d.ow, d.c}; }

void check_dy(const char* op, const Tensor& dy, const Tensor& like,
              const cuda_launch::PoolDims& d) {
  if (dy.dtype() != like.dtype()) {
    throw_error<DTypeError>(op, "dtypes differ: {} and {}", describe(like), describe(dy));
  }
  if (dy.shape() != output_shape(d)) {
    throw_error<ShapeError>(op, "dy {} must be [{},{},{},{}]", describe(dy), d.n, d.oh, d.ow,
                            d.c);
  }
}

Tensor f32_of(const Tensor& t) { return t.dtype() == DType::kBF16 ? to_f32(t) : t; }
Tensor back_to(const Tensor& r, DType dtype) { return dtype == DType::kBF16 ? to_bf16(r) : r; }

void check_lrn(const char* op, const Tensor& x, const LrnParams& p) {
  require_float(op, x);
  if (x.rank() < 1) throw_error<ShapeError>(op, "x must have rank >= 1, got {}", describe(x));
  if (p.depth_radius < 0) {
    throw_error<InvalidArgumentError>(op, "depth_radius must be >= 0, got {}", p.depth_radius);
  }
}

cuda_launch::LrnDims lrn_dims(const Tensor& x, const LrnParams& p) {
  const int64_t n = x.shape().back();
  return {n == 0 ? 0 : x.num_elements() / n, n, std::min(p.depth_radius, n), p.bias, p.alpha,
          p.beta};
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  const char* op = "max_pool2d";
  require_float(op, x_in);
  const cuda_launch::PoolDims d = pool_dims(op, x_in.shape(), p);
  const Tensor x = f32_of(x_in);
  Tensor y = Tensor::empty(output_shape(d), x.dtype(), x.device());
  if (y.num_elements() > 0) {
    cuda_launch::max_pool(code(x.dtype()), x.raw_data(), y.raw_data(), d, stream_of(x, op));
  }
  return back_to(y, x_in.dtype());
}

Tensor max_pool2d_grad(const Tensor& x_in, const Tensor& dy_in, const Pool2dParams& p) {
  const char* op = "max_pool2d_grad";
  require_float(op, x_in);
  const cuda_launch::PoolDims d = pool_dims(op, x_in.shape(), p);
  check_dy(op, dy_in, x_in, d);
  const Tensor x = f32_of(x_in), dy = f32_of(dy_in);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.num_elements() > 0) {
    cuda_launch::max_pool_grad(code(x.dtype()), x.raw_data(), dy.raw_data(), dx.raw_data(), d,
                               stream_of(x, op));
  }
  return back_to(dx, x_in.dtype());
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  const char* op = "avg_pool2d";
  require_float(op, x_in);
  const cuda_launch::PoolDims d = pool_dims(op, x_in.shape(), p);
  const Tensor x = f32_of(x_in);
  Tensor y = Tensor::empty(output_shape(d), x.dtype(), x.device());
  if (y.num_elements() > 0) {
    cuda_launch::avg_pool(code(x.dtype()), x.raw_data(), y.raw_data(), d, stream_of(x, op));
  }
  return back_to(y, x_in.dtype());
}

Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy_in, const Pool2dParams& p) {
  const char* op = "avg_pool2d_grad";
  require_float(op, dy_in);
  const cuda_launch::PoolDims d = pool_dims(op, x_shape, p);
  check_dy(op, dy_in, dy_in, d);
  const Tensor dy = f32_of(dy_in);
  Tensor dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
  if (dx.num_elements() > 0) {
    cuda_launch::avg_pool_grad(code(dy.dtype()), dy.raw_data(), dx.raw_data(), d,
                               stream_of(dy, op));
  }
  return back_to(dx, dy_in.dtype());
}

Tensor local_response_normalization(const Tensor& x_in, const LrnParams& p) {
  const char* op = "local_response_normalization";
  check_lrn(op, x_in, p);
  const Tensor x = f32_of(x_in);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const cuda_launch::LrnDims d = lrn_dims(x, p);
  if (y.num_elements() > 0) {
    cuda_launch::lrn(code(x.dtype()), x.raw_data(), y.raw_data(), d, stream_of(x, op));
  }
  return back_to(y, x_in.dtype());
}

Tensor local_response_normalization_grad(const Tensor& x_in, const Tensor& dy_in,
                                         const LrnParams& p) {
  const char* op = "local_response_normalization_grad";
  check_lrn(op, x_in, p);
  if (dy_in.dtype() != x_in.dtype() || dy_in.shape() != x_in.shape()) {
    throw_error<ShapeError>(op, "dy {} must match x {}", describe(dy_in), describe(x_in));
  }
  const Tensor x = f32_of(x_in), dy = f32_of(dy_in);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (dx.num_elements() > 0) {
    Tensor den = Tensor::empty(x.shape(), x.dtype(), x.device());
    Tensor scale = Tensor::empty(x.shape(), x.dtype(), x.device());
    cuda_launch::lrn_grad(code(x.dtype()), x.raw_data(), dy.raw_data(), dx.raw_data(),
                          den.raw_data(), scale.raw_data(), lrn_dims(x, p), stream_of(x, op));
  }
  return back_to(dx, x_in.dtype());
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_pool_kernels(Table& table) {
  table.max_pool2d = max_pool2d;
  table.max_pool2d_grad = max_pool2d_grad;
  table.avg_pool2d = avg_pool2d;
  table.avg_pool2d_grad = avg_pool2d_grad;
  table.local_response_normalization = local_response_normalization;
  table.local_response_normalization_grad = local_response_normalization_grad;
}

}  // namespace dtensor::kernels::gpu
