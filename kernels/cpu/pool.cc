// Max and average pooling over NHWC windows and their gradients: direct loops over the window
// with the channel dim innermost (contiguous, so the loops vectorize). f32 and f64 natively,
// bf16 through f32. Padded positions never count (TF): max skips them, avg divides by the number
// of unpadded positions.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "runtime/vector_clones.h"

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
  if (g.oh == kOutputSizeOverflow || g.ow == kOutputSizeOverflow) {
    throw_error<InvalidArgumentError>(op, "x [{}] padded by {},{},{},{} is larger than int64 holds",
                                      fmt::join(x, ","), p.pad_top, p.pad_bottom, p.pad_left,
                                      p.pad_right);
  }
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

// The typed loops below each take the images [b0, b1) (for_images splits them over the thread
// pool) and are compiled for AVX-512 and AVX2 besides the baseline (runtime/vector_clones.h): the
// channel loops are plain IEEE compares, selects, adds and multiplies, so every copy gives the
// same bits.
template <typename Fn>
void for_images(const PoolGeometry& g, const Pool2dParams& p, Fn&& fn) {
  const double work = static_cast<double>(g.n * g.oh * g.ow * g.c) *
                      static_cast<double>(std::min(p.window_h, g.h) * std::min(p.window_w, g.w));
  internal::for_blocks(g.n, work, std::forward<Fn>(fn));
}

// Calls fn(b, offset of the output's channels, window) for every output position of the images
// [b0, b1), and fn(k, offset of the input's channels) for the k-th unpadded position of a window
// (row by row). Both inline into their callers, as must the callers' lambdas (always_inline), so
// that the channel loops are compiled into each instruction-set copy.
template <typename Fn>
[[gnu::always_inline]] inline void for_each_output(const PoolGeometry& g, const Pool2dParams& p,
                                                   int64_t b0, int64_t b1, Fn&& fn) {
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        fn(b, ((b * g.oh + oh) * g.ow + ow) * g.c, window_of(g, p, oh, ow));
      }
    }
  }
}
template <typename Fn>
[[gnu::always_inline]] inline void for_each_position(const PoolGeometry& g, int64_t b,
                                                     const Window& win, Fn&& fn) {
  int64_t k = 0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw, ++k) fn(k, ((b * g.h + ih) * g.w + iw) * g.c);
  }
}

template <typename T>
DTENSOR_VECTOR_CLONES void max_pool_typed(const T* x, T* y, const PoolGeometry& g,
                                          const Pool2dParams& p, int64_t b0, int64_t b1) {
  for_each_output(
      g, p, b0, b1, [&](int64_t b, int64_t out, const Window& win) __attribute__((always_inline)) {
        T* __restrict yp = y + out;
        for (int64_t c = 0; c < g.c; ++c) yp[c] = -std::numeric_limits<T>::infinity();
        for_each_position(
            g, b, win, [&](int64_t, int64_t in) __attribute__((always_inline)) {
              const T* __restrict xp = x + in;
              for (int64_t c = 0; c < g.c; ++c) yp[c] = internal::max_nan(yp[c], xp[c]);
            });
      });
}

// dy goes to the first position of each window holding its maximum (the first NaN if any). One
// pass over the window keeps, per channel, the running maximum and the position where it was
// first reached (it moves only on a strictly greater value, or on the first NaN); a second pass
// adds hit * dy at every position, hit being 1 at that position and 0 elsewhere (so a non-finite
// dy reaches the whole window, as 0 * dy does). Branch-free: the channel loops vectorize. `Index`
// holds a position within one image's window (int32 when h * w fits, to match f32's lanes).
template <typename T, typename Index>
DTENSOR_VECTOR_CLONES void max_pool_grad_typed(const T* x, const T* dy, T* dx,
                                               const PoolGeometry& g, const Pool2dParams& p,
                                               int64_t b0, int64_t b1) {
  std::vector<T> best_buffer(static_cast<size_t>(g.c));
  std::vector<Index> at_buffer(static_cast<size_t>(g.c));
  T* __restrict best = best_buffer.data();
  Index* __restrict at = at_buffer.data();
  for_each_output(
      g, p, b0, b1, [&](int64_t b, int64_t out, const Window& win) __attribute__((always_inline)) {
        for (int64_t c = 0; c < g.c; ++c) {
          best[c] = -std::numeric_limits<T>::infinity();
          at[c] = 0;
        }
        for_each_position(
            g, b, win, [&](int64_t k, int64_t in) __attribute__((always_inline)) {
              const T* __restrict xp = x + in;
              const Index position = static_cast<Index>(k);
              for (int64_t c = 0; c < g.c; ++c) {
                const bool better = xp[c] > best[c] || (xp[c] != xp[c] && best[c] == best[c]);
                best[c] = better ? xp[c] : best[c];
                at[c] = better ? position : at[c];
              }
            });
        const T* __restrict dyp = dy + out;
        for_each_position(
            g, b, win, [&](int64_t k, int64_t in) __attribute__((always_inline)) {
              T* __restrict dxp = dx + in;
              const Index position = static_cast<Index>(k);
              for (int64_t c = 0; c < g.c; ++c)
                dxp[c] += (at[c] == position ? T(1) : T(0)) * dyp[c];
            });
      });
}

template <typename T>
DTENSOR_VECTOR_CLONES void avg_pool_typed(const T* x, T* y, const PoolGeometry& g,
                                          const Pool2dParams& p, int64_t b0, int64_t b1) {
  for_each_output(
      g, p, b0, b1, [&](int64_t b, int64_t out, const Window& win) __attribute__((always_inline)) {
        T* __restrict yp = y + out;
        for (int64_t c = 0; c < g.c; ++c) yp[c] = T(0);
        for_each_position(
            g, b, win, [&](int64_t, int64_t in) __attribute__((always_inline)) {
              const T* __restrict xp = x + in;
              for (int64_t c = 0; c < g.c; ++c) yp[c] += xp[c];
            });
        const T inv = T(1) / static_cast<T>(win.count());
        for (int64_t c = 0; c < g.c; ++c) yp[c] *= inv;
      });
}

template <typename T>
DTENSOR_VECTOR_CLONES void avg_pool_grad_typed(const T* dy, T* dx, const PoolGeometry& g,
                                               const Pool2dParams& p, int64_t b0, int64_t b1) {
  for_each_output(
      g, p, b0, b1, [&](int64_t b, int64_t out, const Window& win) __attribute__((always_inline)) {
        const T* __restrict dyp = dy + out;
        const T inv = T(1) / static_cast<T>(win.count());
        for_each_position(
            g, b, win, [&](int64_t, int64_t in) __attribute__((always_inline)) {
              T* __restrict dxp = dx + in;
              for (int64_t c = 0; c < g.c; ++c) dxp[c] += dyp[c] * inv;
            });
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
    for_images(g, p, [&](int64_t b0, int64_t b1) {
      max_pool_typed<T>(x.data<T>(), y.data<T>(), g, p, b0, b1);
    });
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
    for_images(g, p, [&](int64_t b0, int64_t b1) {
      if (g.h * g.w <= std::numeric_limits<int32_t>::max()) {
        max_pool_grad_typed<T, int32_t>(x.data<T>(), dy.data<T>(), dx.data<T>(), g, p, b0, b1);
      } else {
        max_pool_grad_typed<T, int64_t>(x.data<T>(), dy.data<T>(), dx.data<T>(), g, p, b0, b1);
      }
    });
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
    for_images(g, p, [&](int64_t b0, int64_t b1) {
      avg_pool_typed<T>(x.data<T>(), y.data<T>(), g, p, b0, b1);
    });
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
    for_images(g, p, [&](int64_t b0, int64_t b1) {
      avg_pool_grad_typed<T>(dy.data<T>(), dx.data<T>(), g, p, b0, b1);
    });
  });
  return like(dx, dy_in.dtype());
}

}  // namespace dtensor::kernels::cpu
