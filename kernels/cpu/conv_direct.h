// Direct loops for convolution: the f64 reference (gradient checks) and the fallback for f32
// geometries oneDNN does not take. Index arithmetic kept plain so that it is easy to check
// against the definition in kernels/kernels.h; the innermost loop runs over output channels
// (contiguous in HWIO filters and NHWC outputs) so that it vectorizes. Single-threaded,
// stateless. Private to //kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/conv_params.h"

namespace dtensor::kernels::cpu::internal {

// Every extent of one convolution (kernels/conv_params.h), checked by the front.
using kernels::ConvGeometry;

// Calls fn(ih, iw, filter_index) for every filter tap of output position (oh, ow) that reads an
// unpadded input position.
template <typename Fn>
inline void for_each_tap(const ConvGeometry& g, const Conv2dParams& p, int64_t oh, int64_t ow,
                         Fn&& fn) {
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t ih = oh * p.stride_h - p.pad_top + i * p.dilation_h;
    if (ih < 0 || ih >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t iw = ow * p.stride_w - p.pad_left + j * p.dilation_w;
      if (iw < 0 || iw >= g.w) continue;
      fn(ih, iw, i * g.kw + j);
    }
  }
}

// y = conv2d(x, w), accumulating each output in Acc.
template <typename T, typename Acc>
void conv2d_direct(const T* x, const T* w, T* y, const ConvGeometry& g, const Conv2dParams& p) {
  const int64_t opg = g.o / g.groups;
  std::vector<Acc> acc(static_cast<size_t>(g.o));
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        std::fill(acc.begin(), acc.end(), Acc(0));
        for_each_tap(g, p, oh, ow, [&](int64_t ih, int64_t iw, int64_t tap) {
          const T* xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
          const T* wp = w + tap * g.cpg * g.o;
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            Acc* __restrict a = acc.data() + gr * opg;
            for (int64_t ci = 0; ci < g.cpg; ++ci) {
              const Acc xv = static_cast<Acc>(xp[gr * g.cpg + ci]);
              const T* __restrict wr = wp + ci * g.o + gr * opg;
              for (int64_t oc = 0; oc < opg; ++oc) a[oc] += xv * static_cast<Acc>(wr[oc]);
            }
          }
        });
        T* yp = y + ((b * g.oh + oh) * g.ow + ow) * g.o;
        for (int64_t oc = 0; oc < g.o; ++oc) yp[oc] = static_cast<T>(acc[oc]);
      }
    }
  }
}

// dx (zero-filled by the caller) += the adjoint of conv2d in x, applied to dy.
template <typename T, typename Acc>
void conv2d_backprop_input_direct(const T* w, const T* dy, T* dx, const ConvGeometry& g,
                                  const Conv2dParams& p) {
  const int64_t opg = g.o / g.groups;
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const T* dyp = dy + ((b * g.oh + oh) * g.ow + ow) * g.o;
        for_each_tap(g, p, oh, ow, [&](int64_t ih, int64_t iw, int64_t tap) {
          T* dxp = dx + ((b * g.h + ih) * g.w + iw) * g.c;
          const T* wp = w + tap * g.cpg * g.o;
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* __restrict d = dyp + gr * opg;
            for (int64_t ci = 0; ci < g.cpg; ++ci) {
              const T* __restrict wr = wp + ci * g.o + gr * opg;
              Acc s = 0;
              for (int64_t oc = 0; oc < opg; ++oc) s += static_cast<Acc>(d[oc]) * wr[oc];
              dxp[gr * g.cpg + ci] = static_cast<T>(dxp[gr * g.cpg + ci] + s);
            }
          }
        });
      }
    }
  }
}

// dw = the adjoint of conv2d in w, applied to dy, accumulated in Acc (sums over n, oh, ow).
template <typename T, typename Acc>
void conv2d_backprop_filter_direct(const T* x, const T* dy, T* dw, const ConvGeometry& g,
                                   const Conv2dParams& p) {
  const int64_t opg = g.o / g.groups;
  std::vector<Acc> acc(static_cast<size_t>(g.kh * g.kw * g.cpg * g.o), Acc(0));
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const T* dyp = dy + ((b * g.oh + oh) * g.ow + ow) * g.o;
        for_each_tap(g, p, oh, ow, [&](int64_t ih, int64_t iw, int64_t tap) {
          const T* xp = x + ((b * g.h + ih) * g.w + iw) * g.c;
          Acc* ap = acc.data() + tap * g.cpg * g.o;
          for (int64_t gr = 0; gr < g.groups; ++gr) {
            const T* __restrict d = dyp + gr * opg;
            for (int64_t ci = 0; ci < g.cpg; ++ci) {
              const Acc xv = static_cast<Acc>(xp[gr * g.cpg + ci]);
              Acc* __restrict row = ap + ci * g.o + gr * opg;
              for (int64_t oc = 0; oc < opg; ++oc) row[oc] += xv * static_cast<Acc>(d[oc]);
            }
          }
        });
      }
    }
  }
  for (size_t i = 0; i < acc.size(); ++i) dw[i] = static_cast<T>(acc[i]);
}

}  // namespace dtensor::kernels::cpu::internal
