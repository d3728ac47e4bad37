#include "dtensor/creation.h"

#include <cmath>
#include <limits>
#include <map>

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "runtime/element_loops.h"
#include "runtime/random.h"

namespace dtensor {
namespace {

// Builds one buffer per distinct box of `layout` (without its partial dims) with `make_box`,
// shares it among the devices holding that box in one memory space, then applies the partial
// dims.
template <typename MakeBox>
DTensor build(const char* function, const Shape& shape, const Layout& layout, DType dtype,
              MakeBox&& make_box) {
  validate_shape(shape, function);
  layout.check_shape(shape, function);
  const Mesh& mesh = layout.mesh();
  const Layout full = layout.without_partial();
  std::map<std::vector<int64_t>, Tensor> boxes;
  std::vector<Tensor> shards;
  shards.reserve(static_cast<size_t>(mesh.num_local_devices()));
  for (int64_t id : mesh.local_device_ids()) {
    std::vector<int64_t> offset = full.shard_offset(shape, id);
    const Device device = mesh_device(mesh, id);
    auto it = boxes.find(offset);
    // One buffer per box and memory space: every CPU device shares it, a GPU has its own.
    if (it == boxes.end() || !same_memory_space(it->second.device(), device)) {
      Tensor box = Tensor::empty(full.shard_shape(shape, id), dtype, device);
      make_box(box, offset);
      it = boxes.insert_or_assign(std::move(offset), box).first;
    }
    shards.push_back(it->second.with_device(device));
  }
  DTensor value = DTensor::from_trusted_shards(shape, dtype, full, std::move(shards));
  return layout.is_partial() ? relayout(value, layout) : value;
}

// True if `value` converts to T without undefined behaviour or a silently different value:
// integers must be whole and in range, bool 0 or 1, floats finite values within T's range (or
// infinite, or NaN, which every float type holds).
template <typename T>
bool fits_dtype(double value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value == 0.0 || value == 1.0;
  } else if constexpr (std::is_integral_v<T>) {
    // [min, max] as doubles: -2^(b-1) is exact, 2^(b-1) is the first value past max.
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    return std::isfinite(value) && std::trunc(value) == value && value >= lo && value < -lo;
  } else {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    return !std::isfinite(value) || std::fabs(value) <= std::numeric_limits<F>::max();
  }
}

void check_fill_value(const char* function, double value, DType dtype) {
  const bool fits =
      visit_dtype(dtype, [&](auto zero) { return fits_dtype<decltype(zero)>(value); });
  if (!fits) {
    throw_error<InvalidArgumentError>(function, "value {} does not fit dtype {}", value,
                                      dtype_name(dtype));
  }
}

DTensor fill_named(const char* function, const Shape& shape, const Layout& layout, double value,
                   DType dtype) {
  check_fill_value(function, value, dtype);
  // Traced: a constant of the step, made again on replay (so it is freed between steps).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->call(function, {},
                      [function, shape, layout, value, dtype](const StepObserver::Inputs&) {
                        return fill_named(function, shape, layout, value, dtype);
                      });
  }
  return build(function, shape, layout, dtype,
               [&](Tensor& box, const std::vector<int64_t>&) { kernels::fill_value(box, value); });
}

DTensor random(const char* function, const Shape& shape, const Layout& layout, DType dtype,
               const RandomSpec& spec) {
  // A replay would repeat the traced values where eager draws from the seed it is given now.
  reject_in_trace(function,
                  "its values come from a host seed that the trace would freeze; draw them "
                  "outside the step and pass them as an argument");
  return build(function, shape, layout, dtype,
               [&](Tensor& box, const std::vector<int64_t>& offset) {
                 fill_random_shard(box, shape, offset, spec);
               });
}

}  // namespace

DTensor zeros(const Shape& shape, const Layout& layout, DType dtype) {
  return fill_named("fill", shape, layout, 0.0, dtype);
}

DTensor ones(const Shape& shape, const Layout& layout, DType dtype) {
  return fill_named("fill", shape, layout, 1.0, dtype);
}

DTensor fill(const Shape& shape, const Layout& layout, double value, DType dtype) {
  return fill_named("fill", shape, layout, value, dtype);
}

DTensor random_uniform(const Shape& shape, const Layout& layout, uint64_t seed, double minval,
                       double maxval, DType dtype) {
  return random("random_uniform", shape, layout, dtype,
                {RandomDistribution::kUniform, seed, minval, maxval});
}

DTensor random_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean,
                      double stddev, DType dtype) {
  return random("random_normal", shape, layout, dtype,
                {RandomDistribution::kNormal, seed, mean, stddev});
}

DTensor truncated_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean,
                         double stddev, DType dtype) {
  return random("truncated_normal", shape, layout, dtype,
                {RandomDistribution::kTruncatedNormal, seed, mean, stddev});
}

}  // namespace dtensor
