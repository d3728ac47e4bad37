// The normalisation family: layer_norm over the last dim, which is kept whole on every device
// (the kernel needs each row's mean and variance); the other dims keep their sharding. gamma and
// beta are [D] and replicated. The VJP is written in DTensor ops, so it shards like the forward.
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

// ---- layer_norm ------------------------------------------------------------------------------

namespace {

DTensor layer_norm_forward(const DTensor& x, const DTensor& gamma, const DTensor& beta,
                           double eps) {
  check_same_mesh("layer_norm", {&x, &gamma, &beta});
  if (x.rank() < 1 || gamma.shape() != Shape{x.shape().back()} || beta.shape() != gamma.shape()) {
    throw_error<ShapeError>("layer_norm", "gamma {} and beta {} must be [D] for x {}",
                            gamma.short_string(), beta.short_string(), x.short_string());
  }
  std::vector<int> letters = iota_letters(x.rank());
  letters.back() = kBroadcastDim;  // normalised dim stays whole
  OpSignature sig{"layer_norm",
                  {},
                  {{letters, false}, {{kBroadcastDim}, false}, {{kBroadcastDim}, false}},
                  letters};
  return expand(sig, {&x, &gamma, &beta}, x.shape(), x.dtype(),
                8.0 * static_cast<double>(x.num_elements()),
                [eps](const Shards& s) { return kernels::layer_norm(s[0], s[1], s[2], eps).y; });
}

// With xhat = (x - mean) * rstd and gy = g * gamma:
//   dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)),  dgamma = sum(g * xhat),  dbeta = sum(g)
// where means run over the last dim and sums over all the others.
Grads layer_norm_grads(const DTensor& g, const DTensor& x, const DTensor& gamma, double eps) {
  const int64_t last = x.rank() - 1;
  DTensor centered = sub(x, reduce_mean(x, {last}, true));
  DTensor var = reduce_mean(square(centered), {last}, true);
  DTensor rstd = rsqrt(add(var, fill_like(var, eps)));
  DTensor xhat = mul(centered, rstd);
  Grads grads(3);
  if (gradient_needed(0)) {
    DTensor gy = mul(g, gamma);
    DTensor mean_gy = reduce_mean(gy, {last}, true);
    DTensor mean_gy_xhat = reduce_mean(mul(gy, xhat), {last}, true);
    grads[0] = mul(rstd, sub(sub(gy, mean_gy), mul(xhat, mean_gy_xhat)));
  }
  if (gradient_needed(1)) grads[1] = sum_to(mul(g, xhat), gamma.shape());
  if (gradient_needed(2)) grads[2] = sum_to(g, gamma.shape());
  return grads;
}

}  // namespace

DTensor layer_norm(const DTensor& x, const DTensor& gamma, const DTensor& beta, double eps) {
  return recorded(
      {&x, &gamma, &beta}, [&] { return layer_norm_forward(x, gamma, beta, eps); },
      [&](const DTensor&) {
        return [x, gamma, eps](const DTensor& g) -> Grads {
          return layer_norm_grads(g, x, gamma, eps);
        };
      });
}

}  // namespace dtensor
