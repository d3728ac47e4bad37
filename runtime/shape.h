// Tensor shapes: a list of non-negative dimension sizes, row-major.
//
// Shape arithmetic that can overflow (element counts, byte sizes, offsets) and axis arguments are
// checked here, in one place, so that every op and constructor rejects a bad size or axis with
// the same clear error instead of wrapping around.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtensor {

using Shape = std::vector<int64_t>;

// The most elements a (global) shape may have: far below the point where element counts, strides
// and byte offsets overflow int64 for the widest dtype.
constexpr int64_t kMaxElements = int64_t{1} << 50;
// The most bytes one local buffer may have (1 TiB): above any host's memory for one tensor, and
// the sanitizers' allocation limit.
constexpr int64_t kMaxBytes = int64_t{1} << 40;

// Overflow-safe arithmetic: false (and *out unspecified) if the exact result does not fit int64.
bool checked_add(int64_t a, int64_t b, int64_t* out);
bool checked_mul(int64_t a, int64_t b, int64_t* out);

// Product of the dims (1 for a scalar, 0 if a dim is 0). Throws ShapeError on int64 overflow.
int64_t num_elements(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const Shape& shape);
// "[2,3,4]"
std::string shape_to_string(const Shape& shape);
// Where one shard sits in one dim.
struct ShardRange {
  int64_t offset = 0;
  int64_t size = 0;
};

// Chunk semantics for uneven splits: shard `index` of a dim of size `n` split `k` ways has size
// ceil(n/k) at offset index*ceil(n/k), clipped to the dim (the last shards shorter or empty).
ShardRange chunk_range(int64_t n, int64_t k, int64_t index);

// Throws ShapeError naming `function` if a dim is negative or the product of the non-zero dims
// exceeds kMaxElements (also when it overflows), so that element counts, strides and offsets of a
// validated shape never overflow.
void validate_shape(const Shape& shape, const char* function);
// The bytes of a buffer of `shape` with elements of `element_size` bytes; validates the shape and
// throws InvalidArgumentError naming `function` above kMaxBytes.
int64_t checked_num_bytes(const Shape& shape, int64_t element_size, const char* function);

// Axis arguments. An axis counts from the front (0..rank-1) or, negative, from the end
// (-rank..-1). `describe()` names the operand in the error (e.g. a DTensor's short string); it is
// only called on the error path. Errors are InvalidArgumentError:
//   "[softmax] axis 0 is out of range for f32[] []"
[[noreturn]] void throw_axis_out_of_range(const char* function, int64_t axis, int64_t rank,
                                          const std::string& operand);
[[noreturn]] void throw_repeated_axis(const char* function, const std::string& operand);
[[noreturn]] void throw_bad_permutation(const char* function, const std::vector<int64_t>& perm,
                                        const std::string& operand);

template <typename Describe>
int64_t normalize_axis(int64_t axis, int64_t rank, const char* function, Describe&& describe) {
  if (axis < -rank || axis >= rank) throw_axis_out_of_range(function, axis, rank, describe());
  return axis < 0 ? axis + rank : axis;
}

// The axes of a reduction: each normalised, sorted ascending; a repeated axis (also -1 next to
// rank-1) throws "[function] repeated axis in reduction of <operand>".
// An empty list means every axis when `empty_means_all`.
template <typename Describe>
std::vector<int64_t> normalize_axes(std::vector<int64_t> axes, int64_t rank, const char* function,
                                    Describe&& describe, bool empty_means_all = true) {
  if (axes.empty() && empty_means_all) {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
    return axes;
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : axes) {
    a = normalize_axis(a, rank, function, describe);
    if (seen[static_cast<size_t>(a)]) throw_repeated_axis(function, describe());
    seen[static_cast<size_t>(a)] = true;
  }
  std::vector<int64_t> sorted;
  for (int64_t a = 0; a < rank; ++a) {
    if (seen[static_cast<size_t>(a)]) sorted.push_back(a);
  }
  return sorted;
}

// Checks that `perm` is a permutation of 0..rank-1 (InvalidArgumentError otherwise).
template <typename Describe>
void check_permutation(const std::vector<int64_t>& perm, int64_t rank, const char* function,
                       Describe&& describe) {
  std::vector<bool> seen(static_cast<size_t>(rank > 0 ? rank : 0), false);
  bool ok = static_cast<int64_t>(perm.size()) == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < rank && !seen[static_cast<size_t>(perm[i])];
    if (ok) seen[static_cast<size_t>(perm[i])] = true;
  }
  if (!ok) throw_bad_permutation(function, perm, describe());
}

}  // namespace dtensor
