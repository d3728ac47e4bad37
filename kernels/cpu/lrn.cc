// Local response normalisation over the last dim and its gradient, per row of channels:
//   d[c] = bias + alpha * sum_{|c' - c| <= r} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] * d[c]^-beta - 2 alpha beta x[c] sum_{|c' - c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// Computed in the element type (f32 sums of 2r + 1 squares), vectorized across the channels of
// a row. f32 and f64, bf16 through f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

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
void pow_neg_beta(const T* d, T* out, int64_t n, double beta) {
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

// Window sums over one row of channels: the row is copied between r zeros on each side, so that
// the sum over [c - r, c + r] is 2r + 1 shifted adds over the whole row (vectorized across c).
template <typename T>
class WindowSum {
 public:
  WindowSum(int64_t n, int64_t r) : n_(n), r_(r), padded_(static_cast<size_t>(n + 2 * r), T(0)) {}
  // out[c] = sum of v[c'] for |c' - c| <= r, v[c] = f(c).
  template <typename F>
  void operator()(F&& f, T* __restrict out) {
    T* __restrict in = padded_.data() + r_;
    for (int64_t c = 0; c < n_; ++c) in[c] = f(c);
    std::fill(out, out + n_, T(0));
    const T* __restrict base = padded_.data();
    for (int64_t k = 0; k <= 2 * r_; ++k) {
      for (int64_t c = 0; c < n_; ++c) out[c] += base[c + k];
    }
  }

 private:
  int64_t n_, r_;
  std::vector<T> padded_;
};

// The radius that matters for a row of n channels (a larger one sums the same channels).
int64_t effective_radius(int64_t radius, int64_t n) { return std::min(radius, n); }

template <typename T>
void lrn_typed(const T* x, T* y, int64_t rows, int64_t n, const LrnParams& p) {
  WindowSum<T> window(n, effective_radius(p.depth_radius, n));
  std::vector<T> d(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
  const T bias = static_cast<T>(p.bias), alpha = static_cast<T>(p.alpha);
  for (int64_t row = 0; row < rows; ++row) {
    const T* __restrict xr = x + row * n;
    T* __restrict yr = y + row * n;
    window([&](int64_t c) { return xr[c] * xr[c]; }, d.data());
    for (int64_t c = 0; c < n; ++c)
      d[static_cast<size_t>(c)] = bias + alpha * d[static_cast<size_t>(c)];
    pow_neg_beta(d.data(), scale.data(), n, p.beta);
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * scale[static_cast<size_t>(c)];
  }
}

template <typename T>
void lrn_grad_typed(const T* x, const T* dy, T* dx, int64_t rows, int64_t n, const LrnParams& p) {
  WindowSum<T> window(n, effective_radius(p.depth_radius, n));
  std::vector<T> d(static_cast<size_t>(n)), scale(static_cast<size_t>(n)),
      t(static_cast<size_t>(n));
  const T bias = static_cast<T>(p.bias), alpha = static_cast<T>(p.alpha);
  const T k = static_cast<T>(2 * p.alpha * p.beta);
  for (int64_t row = 0; row < rows; ++row) {
    const T* __restrict xr = x + row * n;
    const T* __restrict gr = dy + row * n;
    T* __restrict out = dx + row * n;
    window([&](int64_t c) { return xr[c] * xr[c]; }, d.data());
    for (int64_t c = 0; c < n; ++c)
      d[static_cast<size_t>(c)] = bias + alpha * d[static_cast<size_t>(c)];
    pow_neg_beta(d.data(), scale.data(), n, p.beta);
    // d^(-beta-1) = d^-beta / d.
    const T* __restrict sc = scale.data();
    const T* __restrict dd = d.data();
    window([&](int64_t c) { return gr[c] * xr[c] * sc[c] / dd[c]; }, t.data());
    for (int64_t c = 0; c < n; ++c) out[c] = gr[c] * sc[c] - k * xr[c] * t[static_cast<size_t>(c)];
  }
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
    lrn_typed<T>(x.data<T>(), y.data<T>(), rows, n, p);
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
    lrn_grad_typed<T>(x.data<T>(), dy.data<T>(), dx.data<T>(), rows, n, p);
  });
  return like(dx, x_in.dtype());
}

}  // namespace dtensor::kernels::cpu
