// Local response normalisation over the last dim and its gradient, per row of channels:
//   d[c] = bias + alpha * sum_{|c' - c| <= r} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] * d[c]^-beta - 2 alpha beta x[c] sum_{|c' - c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// Computed in the element type (f32 sums of 2r + 1 squares), vectorized across the channels of
// a row, rows split over the thread pool. f32 and f64, bf16 through f32.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "runtime/vector_clones.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

void check(const char* op, const Tensor& x, const LrnParams& p) {
  if (!is_floating(x.dtype())) internal::throw_unsupported(op, x);
  if (x.rank() < 1) throw_error<ShapeError>(op, "x must have rank >= 1, got {}", describe(x));
  if (p.depth_radius < 0) {
    throw_error<InvalidArgumentError>(op, "depth_radius must be >= 0, got {}", p.depth_radius);
  }
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::kBF16 ? internal::bf16_to_f32(t) : t; }
Tensor like(const Tensor& r, DType dtype) {
  return dtype == DType::kBF16 ? internal::f32_to_bf16(r) : r;
}

// d^-beta, without pow for the common exponents (the tutorial's 0.75, TF's default 0.5, 1):
// pow costs more than the rest of the kernel together.
template <typename T>
[[gnu::always_inline]] inline void pow_neg_beta(const T* __restrict d, T* __restrict out, int64_t n,
                                                double beta) {
  if (beta == 0.75) {
    for (int64_t c = 0; c < n; ++c) {
      const T r = T(1) / std::sqrt(d[c]);
      out[c] = r * std::sqrt(r);
    }
  } else if (beta == 0.5) {
    for (int64_t c = 0; c < n; ++c) out[c] = T(1) / std::sqrt(d[c]);
  } else if (beta == 1.0) {
    for (int64_t c = 0; c < n; ++c) out[c] = T(1) / d[c];
  } else {
    for (int64_t c = 0; c < n; ++c) out[c] = static_cast<T>(std::pow(d[c], -beta));
  }
}

// Scratch rows for the loops below (their helpers always inline, so that they are compiled into
// each instruction-set copy of the loops): `padded` holds a row of n values between r zeros on each
// side, so that the sum over [c - r, c + r] is 2r + 1 shifted adds (vectorized across c, in the
// same order for every c).
template <typename T>
struct Rows {
  Rows(int64_t n, int64_t r)
      : n(n),
        r(r),
        padded(static_cast<size_t>(n + 2 * r), T(0)),
        d(static_cast<size_t>(n)),
        scale(static_cast<size_t>(n)),
        t(static_cast<size_t>(n)) {}
  // out[c] = sum of padded's row over [c - r, c + r]; the row is padded[r .. r + n). Blocks of
  // kBlock channels keep their sums in registers across the 2r + 1 shifted adds (a loop over
  // the whole row would store and reload them at every shift); each sum still adds its terms
  // lowest channel first, from 0.
  [[gnu::always_inline]] void window_sum(T* __restrict out) const {
    constexpr int64_t kBlock = 32;
    const T* __restrict base = padded.data();
    int64_t c = 0;
    for (; c + kBlock <= n; c += kBlock) {
      T sum[kBlock] = {};
      for (int64_t k = 0; k <= 2 * r; ++k) {
        for (int64_t j = 0; j < kBlock; ++j) sum[j] += base[c + k + j];
      }
      for (int64_t j = 0; j < kBlock; ++j) out[c + j] = sum[j];
    }
    for (; c < n; ++c) {
      T sum = 0;
      for (int64_t k = 0; k <= 2 * r; ++k) sum += base[c + k];
      out[c] = sum;
    }
  }
  // d = bias + alpha * (window sum of x^2), scale = d^-beta, for the row x.
  [[gnu::always_inline]] void normalizer(const T* __restrict x, const LrnParams& p) {
    T* __restrict in = padded.data() + r;
    for (int64_t c = 0; c < n; ++c) in[c] = x[c] * x[c];
    T* __restrict dd = d.data();
    window_sum(dd);
    const T bias = static_cast<T>(p.bias), alpha = static_cast<T>(p.alpha);
    for (int64_t c = 0; c < n; ++c) dd[c] = bias + alpha * dd[c];
    pow_neg_beta(dd, scale.data(), n, p.beta);
  }
  int64_t n, r;
  std::vector<T> padded, d, scale, t;
};

// The radius that matters for a row of n channels (a larger one sums the same channels).
int64_t effective_radius(int64_t radius, int64_t n) { return std::min(radius, n); }

// Rows [row0, row1) of n channels. The loops are compiled for AVX-512 and AVX2 besides the
// baseline (runtime/vector_clones.h): adds, multiplies, divisions and square roots round the
// same at any width, so every copy gives the same bits (pow, for other exponents, is a call).
template <typename T>
DTENSOR_VECTOR_CLONES void lrn_typed(const T* x, T* y, int64_t row0, int64_t row1, int64_t n,
                                     const LrnParams& p) {
  Rows<T> s(n, effective_radius(p.depth_radius, n));
  for (int64_t row = row0; row < row1; ++row) {
    const T* __restrict xr = x + row * n;
    T* __restrict yr = y + row * n;
    s.normalizer(xr, p);
    const T* __restrict sc = s.scale.data();
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * sc[c];
  }
}

template <typename T>
DTENSOR_VECTOR_CLONES void lrn_grad_typed(const T* x, const T* dy, T* dx, int64_t row0,
                                          int64_t row1, int64_t n, const LrnParams& p) {
  Rows<T> s(n, effective_radius(p.depth_radius, n));
  const T k = static_cast<T>(2 * p.alpha * p.beta);
  for (int64_t row = row0; row < row1; ++row) {
    const T* __restrict xr = x + row * n;
    const T* __restrict gr = dy + row * n;
    T* __restrict out = dx + row * n;
    s.normalizer(xr, p);
    // d^(-beta-1) = d^-beta / d.
    const T* __restrict sc = s.scale.data();
    const T* __restrict dd = s.d.data();
    T* __restrict in = s.padded.data() + s.r;
    for (int64_t c = 0; c < n; ++c) in[c] = gr[c] * xr[c] * sc[c] / dd[c];
    T* __restrict t = s.t.data();
    s.window_sum(t);
    for (int64_t c = 0; c < n; ++c) out[c] = gr[c] * sc[c] - k * xr[c] * t[c];
  }
}

// Rows [0, rows) of n channels, split over the thread pool.
template <typename Fn>
void for_rows(int64_t rows, int64_t n, const LrnParams& p, Fn&& fn) {
  const int64_t r = effective_radius(p.depth_radius, n);
  internal::for_blocks(rows, static_cast<double>(rows * n) * static_cast<double>(2 * r + 4),
                       std::forward<Fn>(fn));
}

}  // namespace

Tensor local_response_normalization(const Tensor& x_in, const LrnParams& p) {
  check("local_response_normalization", x_in, p);
  const Tensor x = as_f32(x_in);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x_in.device());
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  internal::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_rows(rows, n, p, [&](int64_t row0, int64_t row1) {
      lrn_typed<T>(x.data<T>(), y.data<T>(), row0, row1, n, p);
    });
  });
  return like(y, x_in.dtype());
}

Tensor local_response_normalization_grad(const Tensor& x_in, const Tensor& dy_in,
                                         const LrnParams& p) {
  check("local_response_normalization_grad", x_in, p);
  if (dy_in.dtype() != x_in.dtype() || dy_in.shape() != x_in.shape()) {
    throw_error<ShapeError>("local_response_normalization_grad", "dy {} must match x {}",
                            describe(dy_in), describe(x_in));
  }
  const Tensor x = as_f32(x_in), dy = as_f32(dy_in);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x_in.device());
  const int64_t n = x.shape().back();
  const int64_t rows = n == 0 ? 0 : x.num_elements() / n;
  internal::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_rows(rows, n, p, [&](int64_t row0, int64_t row1) {
      lrn_grad_typed<T>(x.data<T>(), dy.data<T>(), dx.data<T>(), row0, row1, n, p);
    });
  });
  return like(dx, x_in.dtype());
}

}  // namespace dtensor::kernels::cpu
