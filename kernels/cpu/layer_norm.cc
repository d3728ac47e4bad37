// Layer normalization over the last axis and its gradient. Row statistics accumulate in f64.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

// Shape of mean and rstd: x's shape with the last dim set to 1.
Shape stats_shape(const Tensor& x) {
  Shape s = x.shape();
  s.back() = 1;
  return s;
}

void check_param(const char* op, const char* what, const Tensor& p, const Tensor& x) {
  if (p.dtype() != x.dtype()) {
    throw_error<DTypeError>(op, "{} {} does not match x {}", what, describe(p), describe(x));
  }
  if (p.shape() != Shape{x.shape().back()}) {
    throw_error<ShapeError>(op, "{} {} must have shape [{}] for x {}", what, describe(p),
                            x.shape().back(), describe(x));
  }
}

void check_x(const char* op, const Tensor& x) {
  if (!is_floating(x.dtype())) internal::throw_unsupported(op, x);
  if (x.rank() < 1) throw_error<ShapeError>(op, "x must have rank >= 1, got {}", describe(x));
}

template <typename T>
void layer_norm_typed(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                      LayerNormResult& r) {
  const int64_t d = x.shape().back();
  const int64_t rows = r.mean.num_elements();
  const T* px = x.data<T>();
  const T* __restrict g = gamma.data<T>();
  const T* __restrict b = beta.data<T>();
  T* py = r.y.data<T>();
  T* pm = r.mean.data<T>();
  T* pr = r.rstd.data<T>();
  for (int64_t i = 0; i < rows; ++i) {
    const T* __restrict row = px + i * d;
    const double mean = d > 0 ? internal::sum_f64(row, d) / static_cast<double>(d) : 0.0;
    const double sq = internal::reduce_lanes(
        row, d, 0.0, [](double a, double b) { return a + b; },
        [mean](T v) {
          const double c = static_cast<double>(v) - mean;
          return c * c;
        });
    const double var = d > 0 ? sq / static_cast<double>(d) : 0.0;
    const double rstd = 1.0 / std::sqrt(var + eps);
    pm[i] = static_cast<T>(mean);
    pr[i] = static_cast<T>(rstd);
    const T m = static_cast<T>(mean), s = static_cast<T>(rstd);
    T* __restrict y = py + i * d;
    for (int64_t j = 0; j < d; ++j) y[j] = (row[j] - m) * s * g[j] + b[j];
  }
}

template <typename T>
void layer_norm_grad_typed(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, LayerNormGrad& out) {
  const int64_t d = x.shape().back();
  const int64_t rows = mean.num_elements();
  const T* pdy = dy.data<T>();
  const T* px = x.data<T>();
  const T* __restrict g = gamma.data<T>();
  const T* pm = mean.data<T>();
  const T* pr = rstd.data<T>();
  T* pdx = out.dx.data<T>();
  std::vector<double> dgamma(static_cast<size_t>(d), 0.0), dbeta(static_cast<size_t>(d), 0.0);
  std::vector<T> xhat(static_cast<size_t>(d)), g_buf(static_cast<size_t>(d)),
      gx_buf(static_cast<size_t>(d));
  for (int64_t i = 0; i < rows; ++i) {
    const T* __restrict dyr = pdy + i * d;
    const T* __restrict xr = px + i * d;
    const T m = pm[i], s = pr[i];
    T* __restrict xh = xhat.data();
    T* __restrict gj = g_buf.data();
    T* __restrict gx = gx_buf.data();
    double* __restrict dg = dgamma.data();
    double* __restrict db = dbeta.data();
    for (int64_t j = 0; j < d; ++j) {
      xh[j] = (xr[j] - m) * s;
      gj[j] = dyr[j] * g[j];
      gx[j] = gj[j] * xh[j];
      dg[j] += static_cast<double>(dyr[j]) * static_cast<double>(xh[j]);
      db[j] += static_cast<double>(dyr[j]);
    }
    double mean_g = internal::sum_f64(gj, d), mean_gx = internal::sum_f64(gx, d);
    if (d > 0) {
      mean_g /= static_cast<double>(d);
      mean_gx /= static_cast<double>(d);
    }
    const T a = static_cast<T>(mean_g), b = static_cast<T>(mean_gx);
    T* __restrict dx = pdx + i * d;
    for (int64_t j = 0; j < d; ++j) dx[j] = s * (gj[j] - a - xh[j] * b);
  }
  T* pdg = out.dgamma.data<T>();
  T* pdb = out.dbeta.data<T>();
  for (int64_t j = 0; j < d; ++j) {
    pdg[j] = static_cast<T>(dgamma[static_cast<size_t>(j)]);
    pdb[j] = static_cast<T>(dbeta[static_cast<size_t>(j)]);
  }
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const char* op = "layer_norm";
  check_x(op, x);
  check_param(op, "gamma", gamma, x);
  check_param(op, "beta", beta, x);
  if (!(eps >= 0)) throw_error<InvalidArgumentError>(op, "eps must be >= 0, got {}", eps);
  if (x.dtype() == DType::kBF16) {
    LayerNormResult r = layer_norm(internal::bf16_to_f32(x), internal::bf16_to_f32(gamma),
                                   internal::bf16_to_f32(beta), eps);
    r.y = internal::f32_to_bf16(r.y);
    return r;
  }
  LayerNormResult r{Tensor::empty(x.shape(), x.dtype(), x.device()),
                    Tensor::empty(stats_shape(x), x.dtype(), x.device()),
                    Tensor::empty(stats_shape(x), x.dtype(), x.device())};
  internal::visit_float(x.dtype(),
                        [&](auto tag) { layer_norm_typed<decltype(tag)>(x, gamma, beta, eps, r); });
  return r;
}

LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_grad";
  check_x(op, x);
  if (dy.dtype() != x.dtype()) {
    throw_error<DTypeError>(op, "dy {} does not match x {}", describe(dy), describe(x));
  }
  if (dy.shape() != x.shape()) {
    throw_error<ShapeError>(op, "dy {} does not match x {}", describe(dy), describe(x));
  }
  check_param(op, "gamma", gamma, x);
  const DType stats_dtype = x.dtype() == DType::kBF16 ? DType::kF32 : x.dtype();
  for (const Tensor* t : {&mean, &rstd}) {
    if (t->dtype() != stats_dtype) {
      throw_error<DTypeError>(op, "{} {} does not match x {} (expected {}{})",
                              t == &mean ? "mean" : "rstd", describe(*t), describe(x),
                              dtype_name(stats_dtype), shape_to_string(stats_shape(x)));
    }
    if (t->shape() != stats_shape(x)) {
      throw_error<ShapeError>(op, "{} {} does not match x {} (expected {}{})",
                              t == &mean ? "mean" : "rstd", describe(*t), describe(x),
                              dtype_name(stats_dtype), shape_to_string(stats_shape(x)));
    }
  }
  if (x.dtype() == DType::kBF16) {
    LayerNormGrad g = layer_norm_grad(internal::bf16_to_f32(dy), internal::bf16_to_f32(x),
                                      internal::bf16_to_f32(gamma), mean, rstd);
    return {internal::f32_to_bf16(g.dx), internal::f32_to_bf16(g.dgamma),
            internal::f32_to_bf16(g.dbeta)};
  }
  LayerNormGrad g{Tensor::empty(x.shape(), x.dtype(), x.device()),
                  Tensor::empty(gamma.shape(), x.dtype(), x.device()),
                  Tensor::empty(gamma.shape(), x.dtype(), x.device())};
  internal::visit_float(x.dtype(), [&](auto tag) {
    layer_norm_grad_typed<decltype(tag)>(dy, x, gamma, mean, rstd, g);
  });
  return g;
}

}  // namespace dtensor::kernels::cpu
