// Tensor shapes: a list of non-negative dimension sizes, row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor {

using Shape = std::vector<int64_t>;

// Product of the dims (1 for a scalar).
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

// Throws ShapeError naming `function` if a dim is negative.
void validate_shape(const Shape& shape, const char* function);

}  // namespace dtensor
