// Max and average pooling over NHWC windows and their gradients: direct loops over the window
// with the channel dim innermost (contiguous, so the loops vectorize). f32 and f64 natively,
// bf16 through f32. Padded positions never count (TF): max skips them, avg divides by the number
// of unpadded positions.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

struct PoolGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
};

PoolGeometry geometry(const char* op, const Shape& x, const Pool2dParams& p) {
  if (p.window_h < 1 || p.window_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_top < 0 ||
      p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0 || p.pad_top >= p.window_h ||
      p.pad_bottom >= p.window_h || p.pad_left >= p.window_w || p.pad_right >= p.window_w) {
    throw_error<InvalidArgumentError>(
        op, "window {}x{} and strides {}x{} must be >= 1, paddings {},{},{},{} in [0, window)",
        p.window_h, p.window_w, p.stride_h, p.stride_w, p.pad_top, p.pad_bottom, p.pad_left,
        p.pad_right);
  }
  if (x.size() != 4) throw_error<ShapeError>(op, "x [{}] must be [n,h,w,c]", fmt::join(x, ","));
  PoolGeometry g{x[0], x[1], x[2], x[3], 0, 0};
  g.oh = conv_output_size(g.h, p.pad_top, p.pad_bottom, p.window_h, 1, p.stride_h);
  g.ow = conv_output_size(g.w, p.pad_left, p.pad_right, p.window_w, 1, p.stride_w);
  if (g.oh < 1 || g.ow < 1) {
    throw_error<ShapeError>(op, "the {}x{} window does not fit x [{}] padded by {},{},{},{}",
                            p.window_h, p.window_w, fmt::join(x, ","), p.pad_top, p.pad_bottom,
                            p.pad_left, p.pad_right);
  }
  return g;
}

// The unpadded window of output (oh, ow): rows [h0, h1), columns [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t count() const { return (h1 - h0) * (w1 - w0); }
};
Window window_of(const PoolGeometry& g, const Pool2dParams& p, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * p.stride_h - p.pad_top, w0 = ow * p.stride_w - p.pad_left;
  return {std::max<int64_t>(h0, 0), std::min(h0 + p.window_h, g.h), std::max<int64_t>(w0, 0),
          std::min(w0 + p.window_w, g.w)};
}

void check_float(const char* op, const Tensor& x) {
  if (!is_floating(x.dtype())) internal::throw_unsupported(op, x);
}
void check_dy(const char* op, const Tensor& dy, const Tensor& like, const PoolGeometry& g) {
  if (dy.dtype() != like.dtype()) {
    throw_error<DTypeError>(op, "dtypes differ: {} and {}", describe(like), describe(dy));
  }
  if (dy.shape() != Shape{g.n, g.oh, g.ow, g.c}) {
    throw_error<ShapeError>(op, "dy {} must be [{},{},{},{}]", describe(dy), g.n, g.oh, g.ow, g.c);
  }
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::kBF16 ? internal::bf16_to_f32(t) : t; }
Tensor like(const Tensor& r, DType dtype) {
  return dtype == DType::kBF16 ? internal::f32_to_bf16(r) : r;
}

// Calls fn(n, oh, ow, window) for every output position.
template <typename Fn>
void for_each_output(const PoolGeometry& g, const Pool2dParams& p, Fn&& fn) {
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) fn(b, oh, ow, window_of(g, p, oh, ow));
}

template <typename T>
void max_pool_typed(const T* x, T* y, const PoolGeometry& g, const Pool2dParams& p) {
  for_each_output(g, p, [&](int64_t b, int64_t oh, int64_t ow, const Window& win) {
    T* __restrict yp = y + ((b * g.oh + oh) * g.ow + ow) * g.c;
    std::fill(yp, yp + g.c, -std::numeric_limits<T>::infinity());
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const T* __restrict xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) yp[c] = internal::max_nan(yp[c], xp[c]);
      }
    }
  });
}

// dy goes to the first position of each window holding its maximum (the first NaN if any): the
// window's maximum is recomputed, then its positions are scanned in order with a per-channel
// "taken" flag, branch-free so that the channel loop vectorizes.
template <typename T>
void max_pool_grad_typed(const T* x, const T* dy, T* dx, const PoolGeometry& g,
                         const Pool2dParams& p) {
  std::vector<T> best(static_cast<size_t>(g.c)), taken(static_cast<size_t>(g.c));
  for_each_output(g, p, [&](int64_t b, int64_t oh, int64_t ow, const Window& win) {
    T* __restrict m = best.data();
    T* __restrict done = taken.data();
    std::fill(m, m + g.c, -std::numeric_limits<T>::infinity());
    std::fill(done, done + g.c, T(0));
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const T* __restrict xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) m[c] = internal::max_nan(m[c], xp[c]);
      }
    }
    const T* __restrict dyp = dy + ((b * g.oh + oh) * g.ow + ow) * g.c;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const int64_t base = ((b * g.h + ih) * g.w + iw) * g.c;
        const T* __restrict xp = x + base;
        T* __restrict dxp = dx + base;
        for (int64_t c = 0; c < g.c; ++c) {
          const bool is_max = xp[c] == m[c] || (xp[c] != xp[c] && m[c] != m[c]);
          const T hit = (is_max && done[c] == T(0)) ? T(1) : T(0);
          dxp[c] += hit * dyp[c];
          done[c] += hit;
        }
      }
    }
  });
}

template <typename T>
void avg_pool_typed(const T* x, T* y, const PoolGeometry& g, const Pool2dParams& p) {
  for_each_output(g, p, [&](int64_t b, int64_t oh, int64_t ow, const Window& win) {
    T* __restrict yp = y + ((b * g.oh + oh) * g.ow + ow) * g.c;
    std::fill(yp, yp + g.c, T(0));
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const T* __restrict xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) yp[c] += xp[c];
      }
    }
    const T inv = T(1) / static_cast<T>(win.count());
    for (int64_t c = 0; c < g.c; ++c) yp[c] *= inv;
  });
}

template <typename T>
void avg_pool_grad_typed(const T* dy, T* dx, const PoolGeometry& g, const Pool2dParams& p) {
  for_each_output(g, p, [&](int64_t b, int64_t oh, int64_t ow, const Window& win) {
    const T* __restrict dyp = dy + ((b * g.oh + oh) * g.ow + ow) * g.c;
    const T inv = T(1) / static_cast<T>(win.count());
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        T* __restrict dxp = dx + ((b * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) dxp[c] += dyp[c] * inv;
      }
    }
  });
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  check_float("max_pool2d", x_in);
  const PoolGeometry g = geometry("max_pool2d", x_in.shape(), p);
  const Tensor x = as_f32(x_in);
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.c}, x.dtype(), x_in.device());
  internal::visit_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    max_pool_typed<T>(x.data<T>(), y.data<T>(), g, p);
  });
  return like(y, x_in.dtype());
}

Tensor max_pool2d_grad(const Tensor& x_in, const Tensor& dy_in, const Pool2dParams& p) {
  check_float("max_pool2d_grad", x_in);
  const PoolGeometry g = geometry("max_pool2d_grad", x_in.shape(), p);
  check_dy("max_pool2d_grad", dy_in, x_in, g);
  const Tensor x = as_f32(x_in), dy = as_f32(dy_in);
  Tensor dx = Tensor::zeros(x.shape(), x.dtype(), x_in.device());
  internal::visit_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    max_pool_grad_typed<T>(x.data<T>(), dy.data<T>(), dx.data<T>(), g, p);
  });
  return like(dx, x_in.dtype());
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  check_float("avg_pool2d", x_in);
  const PoolGeometry g = geometry("avg_pool2d", x_in.shape(), p);
  const Tensor x = as_f32(x_in);
  Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.c}, x.dtype(), x_in.device());
  internal::visit_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    avg_pool_typed<T>(x.data<T>(), y.data<T>(), g, p);
  });
  return like(y, x_in.dtype());
}

Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy_in, const Pool2dParams& p) {
  check_float("avg_pool2d_grad", dy_in);
  const PoolGeometry g = geometry("avg_pool2d_grad", x_shape, p);
  check_dy("avg_pool2d_grad", dy_in, dy_in, g);
  const Tensor dy = as_f32(dy_in);
  Tensor dx = Tensor::zeros(x_shape, dy.dtype(), dy_in.device());
  internal::visit_float(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    avg_pool_grad_typed<T>(dy.data<T>(), dx.data<T>(), g, p);
  });
  return like(dx, dy_in.dtype());
}

}  // namespace dtensor::kernels::cpu
