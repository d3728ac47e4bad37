#include "runtime/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace dtensor {

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::string shape_to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

ShardRange chunk_range(int64_t n, int64_t k, int64_t index) {
  int64_t chunk = (n + k - 1) / k;
  int64_t offset = std::min(index * chunk, n);
  return {offset, std::min(chunk, n - offset)};
}

void validate_shape(const Shape& shape, const char* function) {
  for (int64_t d : shape) {
    if (d < 0)
      throw_error<ShapeError>(function, "negative dim in shape {}", shape_to_string(shape));
  }
}

}  // namespace dtensor
