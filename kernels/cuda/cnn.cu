// The CNN launchers of cnn_launch.h: one thread per output element (grid-stride), each gathering
// its inputs in the order the CPU loops add them (kernels/cpu/conv_direct.h, pool.cc, lrn.cc).
#include <cmath>

#include "kernels/cuda/checked_launch.cuh"
#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/device_types.cuh"

namespace dtensor::kernels::cuda_launch {
namespace {

// f64 or f32 (the host side converts bf16 and rejects the rest).
template <typename Fn>
void visit_f32_f64(int dtype, Fn&& fn) {
  if (dtype == kF64) {
    fn(double{});
  } else {
    fn(float{});
  }
}

// Launches pick(T{}) over `count` elements for the element type of `dtype`: every kernel here
// takes (two inputs, the output, its dims, count); an unused input is passed null.
template <typename Pick, typename Dims>
void launch(int dtype, const char* name, Pick pick, const void* a, const void* b, void* out,
            const Dims& d, int64_t count, cudaStream_t stream) {
  visit_f32_f64(dtype, [&](auto tag) {
    using T = decltype(tag);
    checked_launch(name, pick(tag), blocks_for(count), kThreads, stream, static_cast<const T*>(a),
                   static_cast<const T*>(b), static_cast<T*>(out), d, count);
  });
}

// The coordinates of element `idx` of a row-major [*, d1, d2, d3] tensor.
struct Index4 {
  int64_t i0, i1, i2, i3;
};
__device__ inline Index4 split4(int64_t idx, int64_t d1, int64_t d2, int64_t d3) {
  Index4 r;
  r.i3 = idx % d3;
  idx /= d3;
  r.i2 = idx % d2;
  idx /= d2;
  r.i1 = idx % d1;
  r.i0 = idx / d1;
  return r;
}

// ---- Convolution ---------------------------------------------------------------------------

template <typename T>
__global__ void conv2d_kernel(const T* x, const T* w, T* y, ConvDims d, int64_t count) {
  const int64_t opg = d.o / d.groups;
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.oh, d.ow, d.o);  // [n, oh, ow, o]
    const int64_t b = at.i0, oh = at.i1, ow = at.i2, oc = at.i3;
    const int64_t first_c = (oc / opg) * d.cpg;
    T acc = 0;
    for (int64_t i = 0; i < d.kh; ++i) {
      const int64_t ih = oh * d.stride_h - d.pad_top + i * d.dilation_h;
      if (ih < 0 || ih >= d.h) continue;
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t iw = ow * d.stride_w - d.pad_left + j * d.dilation_w;
        if (iw < 0 || iw >= d.w) continue;
        const T* xp = x + ((b * d.h + ih) * d.w + iw) * d.c + first_c;
        const T* wp = w + (i * d.kw + j) * d.cpg * d.o + oc;
        for (int64_t ci = 0; ci < d.cpg; ++ci) acc += xp[ci] * wp[ci * d.o];
      }
    }
    y[idx] = acc;
  }
}

// The output position whose tap k (along one dim) reads input position `in`, or -1.
__device__ inline int64_t output_of_tap(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                                        int64_t pad, int64_t outputs) {
  const int64_t t = in + pad - k * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t o = t / stride;
  return o < outputs ? o : -1;
}

template <typename T>
__global__ void conv2d_backprop_input_kernel(const T* w, const T* dy, T* dx, ConvDims d,
                                             int64_t count) {
  const int64_t opg = d.o / d.groups;
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.h, d.w, d.c);  // [n, h, w, c]
    const int64_t b = at.i0, ih = at.i1, iw = at.i2, cf = at.i3;
    const int64_t group = cf / d.cpg, ci = cf % d.cpg;
    T acc = 0;
    for (int64_t i = 0; i < d.kh; ++i) {
      const int64_t oh = output_of_tap(ih, i, d.stride_h, d.dilation_h, d.pad_top, d.oh);
      if (oh < 0) continue;
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t ow = output_of_tap(iw, j, d.stride_w, d.dilation_w, d.pad_left, d.ow);
        if (ow < 0) continue;
        const T* dyp = dy + ((b * d.oh + oh) * d.ow + ow) * d.o + group * opg;
        const T* wp = w + ((i * d.kw + j) * d.cpg + ci) * d.o + group * opg;
        T s = 0;
        for (int64_t oc = 0; oc < opg; ++oc) s += dyp[oc] * wp[oc];
        acc += s;
      }
    }
    dx[idx] = acc;
  }
}

template <typename T>
__global__ void conv2d_backprop_filter_kernel(const T* x, const T* dy, T* dw, ConvDims d,
                                              int64_t count) {
  const int64_t opg = d.o / d.groups;
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.kw, d.cpg, d.o);  // [kh, kw, cpg, o]
    const int64_t i = at.i0, j = at.i1, ci = at.i2, oc = at.i3;
    const int64_t cf = (oc / opg) * d.cpg + ci;
    double acc = 0;
    for (int64_t b = 0; b < d.n; ++b) {
      for (int64_t oh = 0; oh < d.oh; ++oh) {
        const int64_t ih = oh * d.stride_h - d.pad_top + i * d.dilation_h;
        if (ih < 0 || ih >= d.h) continue;
        for (int64_t ow = 0; ow < d.ow; ++ow) {
          const int64_t iw = ow * d.stride_w - d.pad_left + j * d.dilation_w;
          if (iw < 0 || iw >= d.w) continue;
          acc += static_cast<double>(x[((b * d.h + ih) * d.w + iw) * d.c + cf]) *
                 static_cast<double>(dy[((b * d.oh + oh) * d.ow + ow) * d.o + oc]);
        }
      }
    }
    dw[idx] = static_cast<T>(acc);
  }
}

// ---- Pooling -------------------------------------------------------------------------------

// The unpadded window of output (oh, ow): rows [h0, h1), columns [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
};
__device__ inline Window window_of(const PoolDims& d, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * d.stride_h - d.pad_top, w0 = ow * d.stride_w - d.pad_left;
  return {h0 < 0 ? 0 : h0, h0 + d.window_h < d.h ? h0 + d.window_h : d.h, w0 < 0 ? 0 : w0,
          w0 + d.window_w < d.w ? w0 + d.window_w : d.w};
}
// The CPU's max (kernels/cpu/internal.h max_nan): a NaN wins, ties keep the second operand.
template <typename T>
__device__ inline T pool_max(T a, T b) {
  return (a > b || a != a) ? a : b;
}
// The first and last output positions along one dim whose window holds input position `in`.
__device__ inline void outputs_covering(int64_t in, int64_t window, int64_t stride, int64_t pad,
                                        int64_t outputs, int64_t* first, int64_t* last) {
  const int64_t lo = in + pad - window + 1;
  *first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  const int64_t hi = (in + pad) / stride;
  *last = hi < outputs - 1 ? hi : outputs - 1;
}

template <typename T>
__device__ T window_max(const T* x, const PoolDims& d, const Window& win, int64_t b, int64_t c) {
  T m = -INFINITY;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      m = pool_max(m, x[((b * d.h + ih) * d.w + iw) * d.c + c]);
    }
  }
  return m;
}

template <typename T>
__global__ void max_pool_kernel(const T* x, const T*, T* y, PoolDims d, int64_t count) {
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.oh, d.ow, d.c);  // [n, oh, ow, c]
    y[idx] = window_max(x, d, window_of(d, at.i1, at.i2), at.i0, at.i3);
  }
}

template <typename T>
__global__ void avg_pool_kernel(const T* x, const T*, T* y, PoolDims d, int64_t count) {
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.oh, d.ow, d.c);  // [n, oh, ow, c]
    const int64_t b = at.i0, c = at.i3;
    const Window win = window_of(d, at.i1, at.i2);
    T s = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) s += x[((b * d.h + ih) * d.w + iw) * d.c + c];
    }
    y[idx] = s * (T(1) / static_cast<T>((win.h1 - win.h0) * (win.w1 - win.w0)));
  }
}

// dx at (b, ih, iw, c) gathers from every window holding it, in the CPU's output order. Max: 1 or
// 0 times dy, 1 where (ih, iw) is the window's first maximum (the first NaN if any).
template <typename T, bool kMax>
__global__ void pool_grad_kernel(const T* x, const T* dy, T* dx, PoolDims d, int64_t count) {
  DTENSOR_FOR_EACH(idx, count) {
    const Index4 at = split4(idx, d.h, d.w, d.c);  // [n, h, w, c]
    const int64_t b = at.i0, ih = at.i1, iw = at.i2, c = at.i3;
    int64_t oh0, oh1, ow0, ow1;
    outputs_covering(ih, d.window_h, d.stride_h, d.pad_top, d.oh, &oh0, &oh1);
    outputs_covering(iw, d.window_w, d.stride_w, d.pad_left, d.ow, &ow0, &ow1);
    T acc = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Window win = window_of(d, oh, ow);
        const T g = dy[((b * d.oh + oh) * d.ow + ow) * d.c + c];
        if constexpr (kMax) {
          const T m = window_max(x, d, win, b, c);
          bool mine = false, found = false;
          for (int64_t h = win.h0; h < win.h1 && !found; ++h) {
            for (int64_t w = win.w0; w < win.w1 && !found; ++w) {
              const T v = x[((b * d.h + h) * d.w + w) * d.c + c];
              found = v == m || (v != v && m != m);
              mine = found && h == ih && w == iw;
            }
          }
          acc += (mine ? T(1) : T(0)) * g;
        } else {
          acc += g * (T(1) / static_cast<T>((win.h1 - win.h0) * (win.w1 - win.w0)));
        }
      }
    }
    dx[idx] = acc;
  }
}

// ---- Local response normalisation ----------------------------------------------------------

// d^-beta as the CPU computes it (kernels/cpu/lrn.cc pow_neg_beta).
template <typename T>
__device__ inline T pow_neg_beta(T d, double beta) {
  if (beta == 0.75) {
    const T r = T(1) / sqrt(d);
    return r * sqrt(r);
  }
  if (beta == 0.5) return T(1) / sqrt(d);
  if (beta == 1.0) return T(1) / d;
  return static_cast<T>(pow(static_cast<double>(d), -beta));
}

// bias + alpha * (the sum of x^2 over the channels within `radius` of c), in the CPU's order.
template <typename T>
__device__ inline T lrn_denominator(const T* row, int64_t c, const LrnDims& d) {
  T s = 0;
  for (int64_t k = c - d.radius; k <= c + d.radius; ++k) {
    if (k >= 0 && k < d.n) s += row[k] * row[k];
  }
  return static_cast<T>(d.bias) + static_cast<T>(d.alpha) * s;
}

template <typename T>
__global__ void lrn_kernel(const T* x, const T*, T* y, LrnDims d, int64_t count) {
  DTENSOR_FOR_EACH(idx, count) {
    const int64_t c = idx % d.n;
    const T den = lrn_denominator(x + (idx - c), c, d);
    y[idx] = x[idx] * pow_neg_beta(den, d.beta);
  }
}

template <typename T>
__global__ void lrn_scale_kernel(const T* x, T* den, T* scale, LrnDims d, int64_t count) {
  DTENSOR_FOR_EACH(idx, count) {
    const int64_t c = idx % d.n;
    den[idx] = lrn_denominator(x + (idx - c), c, d);
    scale[idx] = pow_neg_beta(den[idx], d.beta);
  }
}

template <typename T>
__global__ void lrn_grad_kernel(const T* x, const T* dy, const T* den, const T* scale, T* dx,
                                LrnDims d, int64_t count) {
  const T k2 = static_cast<T>(2 * d.alpha * d.beta);
  DTENSOR_FOR_EACH(idx, count) {
    const int64_t c = idx % d.n, row = idx - c;
    T s = 0;
    for (int64_t k = c - d.radius; k <= c + d.radius; ++k) {
      if (k >= 0 && k < d.n) s += dy[row + k] * x[row + k] * scale[row + k] / den[row + k];
    }
    dx[idx] = dy[idx] * scale[idx] - k2 * x[idx] * s;
  }
}

}  // namespace

void conv2d_direct(int dtype, const void* x, const void* w, void* y, const ConvDims& d,
                   cudaStream_t stream) {
  launch(dtype, "conv2d_direct", [](auto t) { return conv2d_kernel<decltype(t)>; }, x, w, y, d,
         d.n * d.oh * d.ow * d.o, stream);
}

void conv2d_backprop_input_direct(int dtype, const void* w, const void* dy, void* dx,
                                  const ConvDims& d, cudaStream_t stream) {
  launch(dtype, "conv2d_backprop_input_direct",
         [](auto t) { return conv2d_backprop_input_kernel<decltype(t)>; }, w, dy, dx, d,
         d.n * d.h * d.w * d.c, stream);
}

void conv2d_backprop_filter_direct(int dtype, const void* x, const void* dy, void* dw,
                                   const ConvDims& d, cudaStream_t stream) {
  launch(dtype, "conv2d_backprop_filter_direct",
         [](auto t) { return conv2d_backprop_filter_kernel<decltype(t)>; }, x, dy, dw, d,
         d.kh * d.kw * d.cpg * d.o, stream);
}

void max_pool(int dtype, const void* x, void* y, const PoolDims& d, cudaStream_t stream) {
  launch(dtype, "max_pool", [](auto t) { return max_pool_kernel<decltype(t)>; }, x, nullptr, y,
         d, d.n * d.oh * d.ow * d.c, stream);
}

void max_pool_grad(int dtype, const void* x, const void* dy, void* dx, const PoolDims& d,
                   cudaStream_t stream) {
  launch(dtype, "max_pool_grad", [](auto t) { return pool_grad_kernel<decltype(t), true>; }, x,
         dy, dx, d, d.n * d.h * d.w * d.c, stream);
}

void avg_pool(int dtype, const void* x, void* y, const PoolDims& d, cudaStream_t stream) {
  launch(dtype, "avg_pool", [](auto t) { return avg_pool_kernel<decltype(t)>; }, x, nullptr, y,
         d, d.n * d.oh * d.ow * d.c, stream);
}

void avg_pool_grad(int dtype, const void* dy, void* dx, const PoolDims& d, cudaStream_t stream) {
  launch(dtype, "avg_pool_grad", [](auto t) { return pool_grad_kernel<decltype(t), false>; },
         nullptr, dy, dx, d, d.n * d.h * d.w * d.c, stream);
}

void lrn(int dtype, const void* x, void* y, const LrnDims& d, cudaStream_t stream) {
  launch(dtype, "lrn", [](auto t) { return lrn_kernel<decltype(t)>; }, x, nullptr, y, d,
         d.rows * d.n, stream);
}

void lrn_grad(int dtype, const void* x, const void* dy, void* dx, void* scratch_d,
              void* scratch_scale, const LrnDims& d, cudaStream_t stream) {
  const int64_t count = d.rows * d.n;
  visit_f32_f64(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* den = static_cast<T*>(scratch_d);
    T* scale = static_cast<T*>(scratch_scale);
    checked_launch("lrn_scale", lrn_scale_kernel<T>, blocks_for(count), kThreads, stream,
                   static_cast<const T*>(x), den, scale, d, count);
    checked_launch("lrn_grad", lrn_grad_kernel<T>, blocks_for(count), kThreads, stream,
                   static_cast<const T*>(x), static_cast<const T*>(dy),
                   static_cast<const T*>(den), static_cast<const T*>(scale), static_cast<T*>(dx),
                   d, count);
  });
}

}  // namespace dtensor::kernels::cuda_launch
