// Local response normalisation over the last dim and its gradient, per row of channels:
//   d[c] = bias + alpha * sum_{|c' - c| <= r} x[c']^2,   y[c] = x[c] * d[c]^-beta
//   dx[c] = dy[c] * d[c]^-beta - 2 alpha beta x[c] sum_{|c' - c| <= r} dy[c'] x[c'] d[c']^(-beta-1)
// The window sums run over prefix sums in f64 (a row is a few dozen channels), so every element
// costs O(1) whatever the radius. f32 and f64, bf16 through f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/kernels/cpu/cpu_kernels.h"
#include "ops/kernels/cpu/internal.h"

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

// prefix[i] = sum of v[0..i); window(c) = sum of v over [c - r, c + r] clipped to [0, n).
struct WindowSums {
  std::vector<double> prefix;
  double window(int64_t c, int64_t r, int64_t n) const {
    return prefix[static_cast<size_t>(std::min(c + r + 1, n))] -
           prefix[static_cast<size_t>(std::max<int64_t>(c - r, 0))];
  }
};

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

// d[c] = bias + alpha * (window sum of x^2) for one row; the prefix sums run in f64.
template <typename T>
void lrn_denominators(const T* x, T* d, int64_t n, const LrnParams& p, WindowSums& sq) {
  for (int64_t c = 0; c < n; ++c) {
    const double v = x[c];
    sq.prefix[static_cast<size_t>(c + 1)] = sq.prefix[static_cast<size_t>(c)] + v * v;
  }
  for (int64_t c = 0; c < n; ++c) {
    d[c] = static_cast<T>(p.bias + p.alpha * sq.window(c, p.depth_radius, n));
  }
}

template <typename T>
void lrn_typed(const T* x, T* y, int64_t rows, int64_t n, const LrnParams& p) {
  WindowSums sq{std::vector<double>(static_cast<size_t>(n + 1), 0.0)};
  std::vector<T> d(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    lrn_denominators(xr, d.data(), n, p, sq);
    pow_neg_beta(d.data(), scale.data(), n, p.beta);
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * scale[static_cast<size_t>(c)];
  }
}

template <typename T>
void lrn_grad_typed(const T* x, const T* dy, T* dx, int64_t rows, int64_t n, const LrnParams& p) {
  WindowSums sq{std::vector<double>(static_cast<size_t>(n + 1), 0.0)};
  WindowSums t{std::vector<double>(static_cast<size_t>(n + 1), 0.0)};
  std::vector<T> d(static_cast<size_t>(n)), scale(static_cast<size_t>(n));
  const double k = 2 * p.alpha * p.beta;
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = x + row * n;
    const T* gr = dy + row * n;
    T* out = dx + row * n;
    lrn_denominators(xr, d.data(), n, p, sq);
    pow_neg_beta(d.data(), scale.data(), n, p.beta);
    // d^(-beta-1) = d^-beta / d.
    for (int64_t c = 0; c < n; ++c) {
      const size_t i = static_cast<size_t>(c);
      const double term = static_cast<double>(gr[c]) * xr[c] * scale[i] / d[i];
      t.prefix[i + 1] = t.prefix[i] + term;
    }
    for (int64_t c = 0; c < n; ++c) {
      out[c] = static_cast<T>(gr[c] * scale[static_cast<size_t>(c)] -
                              k * xr[c] * t.window(c, p.depth_radius, n));
    }
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
