// CNN layers that are not windows over H and W: local_response_normalization (a window over the
// channel dim, kept whole; n, h and w shard freely), bias_add, flatten and dropout (composed of
// other ops, so they shard, and differentiate, as those do).
#include <cmath>

#include "dtensor/creation.h"
#include "dtensor/host_copy.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

// ---- local_response_normalization ------------------------------------------------------------

namespace {

// Per pixel: n, h and w keep their sharding, the channels are whole.
const std::vector<int> kLrnLetters = {0, 1, 2, kBroadcastDim};

kernels::LrnParams lrn_params(const DTensor& x, int64_t depth_radius, double bias, double alpha,
                              double beta) {
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>("local_response_normalization", "{} must be f32, f64 or bf16",
                            x.short_string());
  }
  if (x.rank() != 4) {
    throw_error<ShapeError>("local_response_normalization", "x {} must be [n,h,w,c]",
                            x.short_string());
  }
  if (depth_radius < 0) {
    throw_error<InvalidArgumentError>("local_response_normalization",
                                      "depth_radius must be >= 0, got {}", depth_radius);
  }
  return {depth_radius, bias, alpha, beta};
}

DTensor lrn_forward(const DTensor& x, const kernels::LrnParams& params) {
  OpSignature sig{"local_response_normalization", {}, {{kLrnLetters, false}}, kLrnLetters};
  return expand(
      sig, {&x}, x.shape(), x.dtype(), 4.0 * static_cast<double>(x.num_elements()),
      [params](const Shards& s) { return kernels::local_response_normalization(s[0], params); });
}

// Linear in dy, not in x.
DTensor lrn_backprop(const DTensor& x, const DTensor& dy, const kernels::LrnParams& params) {
  OpSignature sig{"local_response_normalization",
                  "grad",
                  {{kLrnLetters, false}, {kLrnLetters, true}},
                  kLrnLetters,
                  Linearity::kMultilinear};
  return expand(sig, {&x, &dy}, x.shape(), x.dtype(), 8.0 * static_cast<double>(x.num_elements()),
                [params](const Shards& s) {
                  return kernels::local_response_normalization_grad(s[0], s[1], params);
                });
}

}  // namespace

DTensor local_response_normalization(const DTensor& x, int64_t depth_radius, double bias,
                                     double alpha, double beta) {
  const kernels::LrnParams params = lrn_params(x, depth_radius, bias, alpha, beta);
  return recorded(
      {&x}, [&] { return lrn_forward(x, params); },
      [&](const DTensor&) {
        return [x, params](const DTensor& g) -> Grads { return {lrn_backprop(x, g, params)}; };
      });
}

// ---- bias_add, flatten -------------------------------------------------------------------------

DTensor bias_add(const DTensor& x, const DTensor& b) {
  check_same_mesh("bias_add", {&x, &b});
  check_same_dtype("bias_add", x, b);
  if (x.rank() < 1 || b.shape() != Shape{x.shape().back()}) {
    throw_error<ShapeError>("bias_add", "the bias {} must be [c] for x {} (c its last dim)",
                            b.short_string(), x.short_string());
  }
  return add(x, b);
}

DTensor flatten(const DTensor& x) {
  if (x.rank() < 1) {
    throw_error<ShapeError>("flatten", "x {} must have rank >= 1", x.short_string());
  }
  int64_t rest = 1;
  for (int64_t i = 1; i < x.rank(); ++i) rest *= x.shape()[static_cast<size_t>(i)];
  return reshape(x, {x.shape()[0], rest});
}

// ---- dropout -----------------------------------------------------------------------------------

namespace {

void check_dropout(const DTensor& x, double rate) {
  if (!(rate >= 0.0 && rate < 1.0)) {
    throw_error<InvalidArgumentError>("dropout", "rate must be in [0, 1), got {} for x {}", rate,
                                      x.short_string());
  }
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>("dropout", "{} must be f32, f64 or bf16", x.short_string());
  }
}

// 1 / (1 - rate) where uniform values drawn by global position (the same on every mesh and
// layout) are >= rate, else 0. Built without recording: the mask is a constant of the product.
DTensor keep_mask(const Shape& shape, const Layout& layout, DType dtype, double rate,
                  uint64_t seed) {
  return unrecorded([&] {
    const Layout scalar = Layout::replicated(layout.mesh(), 0);
    const DTensor u = random_uniform(shape, layout, seed, 0.0, 1.0);
    return where(greater_equal(u, fill({}, scalar, rate)),
                 fill({}, scalar, 1.0 / (1.0 - rate), dtype), fill({}, scalar, 0.0, dtype));
  });
}

uint64_t seed_value(const DTensor& seed) {
  const Tensor s = host_readable(to_global(seed));  // one scalar, wherever the mesh's devices are
  return seed.dtype() == DType::kI64 ? static_cast<uint64_t>(s.data<int64_t>()[0])
                                     : static_cast<uint64_t>(s.data<int32_t>()[0]);
}

}  // namespace

DTensor dropout(const DTensor& x, double rate, uint64_t seed, bool training) {
  check_dropout(x, rate);
  if (!training || rate == 0.0) return x;
  reject_in_trace("dropout",
                  "its mask comes from a host seed that the trace would freeze; pass the seed as "
                  "a DTensor (an argument of the step, or SeedGenerator::next()) to "
                  "dropout(x, rate, seed)");
  return mul(x, keep_mask(x.shape(), x.layout().without_partial(), x.dtype(), rate, seed));
}

DTensor dropout(const DTensor& x, double rate, const DTensor& seed, bool training) {
  check_dropout(x, rate);
  if (seed.dtype() != DType::kI64 && seed.dtype() != DType::kI32) {
    throw_error<DTypeError>("dropout", "seed {} must be i64 or i32", seed.short_string());
  }
  if (seed.rank() != 0 || seed.layout().is_partial()) {
    throw_error<ShapeError>("dropout", "seed {} must be a scalar that is not partial",
                            seed.short_string());
  }
  if (!training || rate == 0.0) return x;
  const Shape shape = x.shape();
  const Layout layout = x.layout().without_partial();
  const DType dtype = x.dtype();
  auto make = [shape, layout, dtype, rate](const DTensor& s) {
    return keep_mask(shape, layout, dtype, rate, seed_value(s));
  };
  // Traced: the mask is made again on every replay from the seed's value then.
  const DTensor keep = StepObserver::active() != nullptr
                           ? StepObserver::active()->call(
                                 "dropout_mask", {&seed},
                                 [make](const StepObserver::Inputs& in) { return make(*in[0]); })
                           : make(seed);
  return mul(x, keep);
}

}  // namespace dtensor
