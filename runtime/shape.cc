#include "runtime/shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace dtensor {

bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

int64_t num_elements(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (!checked_mul(n, d, &n)) {
      throw_error<ShapeError>("num_elements", "element count of shape {} overflows int64",
                              shape_to_string(shape));
    }
  }
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
  int64_t chunk = n / k + (n % k != 0);  // ceil(n/k) without overflowing n + k - 1
  int64_t offset = std::min(index * chunk, n);
  return {offset, std::min(chunk, n - offset)};
}

void validate_shape(const Shape& shape, const char* function) {
  // The bound is on the non-zero dims, so that strides stay in range also for empty shapes.
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d < 0)
      throw_error<ShapeError>(function, "negative dim in shape {}", shape_to_string(shape));
    if (d > 0) overflow = overflow || !checked_mul(n, d, &n);
  }
  if (overflow || n > kMaxElements) {
    throw_error<ShapeError>(function, "shape {} has too many elements (at most {} are supported)",
                            shape_to_string(shape), kMaxElements);
  }
}

int64_t checked_num_bytes(const Shape& shape, int64_t element_size, const char* function) {
  validate_shape(shape, function);
  int64_t bytes = 0;
  if (!checked_mul(num_elements(shape), element_size, &bytes) || bytes > kMaxBytes) {
    throw_error<InvalidArgumentError>(
        function,
        "a buffer of shape {} with {}-byte elements needs {} bytes; at most {} are supported",
        shape_to_string(shape), element_size, bytes, kMaxBytes);
  }
  return bytes;
}

void throw_axis_out_of_range(const char* function, int64_t axis, int64_t /*rank*/,
                             const std::string& operand) {
  throw_error<InvalidArgumentError>(function, "axis {} is out of range for {}", axis, operand);
}

void throw_repeated_axis(const char* function, const std::string& operand) {
  throw_error<InvalidArgumentError>(function, "repeated axis in reduction of {}", operand);
}

void throw_bad_permutation(const char* function, const std::vector<int64_t>& perm,
                           const std::string& operand) {
  throw_error<InvalidArgumentError>(function, "[{}] is not a permutation of the dims of {}",
                                    fmt::join(perm, ","), operand);
}

}  // namespace dtensor
