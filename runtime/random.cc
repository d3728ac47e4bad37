#include "runtime/random.h"

#include <cmath>

#include "runtime/element_loops.h"
#include "runtime/error.h"

namespace dtensor {
namespace {

void check_arguments(const char* fn, const Tensor& shard, const Shape& global,
                     const std::vector<int64_t>& offset, const RandomSpec& spec) {
  const DType dtype = shard.dtype();
  if (spec.distribution == RandomDistribution::kUniform) {
    if (!is_floating(dtype) && !is_integer(dtype))
      throw_error<DTypeError>(fn,
                              "random generation does not support dtype {} (expected f32, f64, "
                              "bf16, i32 or i64)",
                              dtype_name(dtype));
  } else if (!is_floating(dtype)) {
    throw_error<DTypeError>(
        fn, "random generation does not support dtype {} (expected f32, f64 or bf16)",
        dtype_name(dtype));
  }

  validate_shape(global, fn);
  const Shape& local = shard.shape();
  if (local.size() != global.size())
    throw_error<ShapeError>(fn, "shard shape {} has rank {} but global shape {} has rank {}",
                            shape_to_string(local), local.size(), shape_to_string(global),
                            global.size());
  if (offset.size() != global.size())
    throw_error<ShapeError>(fn, "offset {} has {} entries but global shape {} has rank {}",
                            shape_to_string(offset), offset.size(), shape_to_string(global),
                            global.size());
  for (size_t d = 0; d < global.size(); ++d) {
    if (offset[d] < 0 || offset[d] > global[d] - local[d])
      throw_error<ShapeError>(
          fn, "shard shape {} at offset {} does not fit in global shape {} (dim {})",
          shape_to_string(local), shape_to_string(offset), shape_to_string(global), d);
  }

  if (spec.distribution == RandomDistribution::kUniform) {
    if (!std::isfinite(spec.a) || !std::isfinite(spec.b))
      throw_error<InvalidArgumentError>(fn, "minval and maxval must be finite, got {} and {}",
                                        spec.a, spec.b);
    if (!(spec.a < spec.b))
      throw_error<InvalidArgumentError>(fn, "needs minval < maxval, got minval {} and maxval {}",
                                        spec.a, spec.b);
  } else {
    if (!std::isfinite(spec.a))
      throw_error<InvalidArgumentError>(fn, "mean must be finite, got {}", spec.a);
    if (!(spec.b > 0) || !std::isfinite(spec.b))
      throw_error<InvalidArgumentError>(fn, "stddev must be finite and > 0, got {}", spec.b);
  }
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  return kernels::cpu::philox4x32_10(counter, key);
}

void fill_random_shard(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                       const RandomSpec& spec) {
  check_arguments(random_function_name(spec.distribution), shard, global_shape, offset, spec);
  kernels::fill_random(shard, global_shape, offset, spec);
}

}  // namespace dtensor
