#include "train/ps/partitioner.h"

#include <algorithm>

#include "runtime/error.h"

namespace dtensor::ps {
namespace {

int64_t total_bytes(const Shape& shape, int64_t element_bytes) {
  return num_elements(shape) * element_bytes;
}

}  // namespace

Partitioner fixed_shards_partitioner(int64_t num_shards) {
  if (num_shards < 1) {
    throw_error<InvalidArgumentError>("fixed_shards_partitioner", "num_shards={} must be >= 1",
                                      num_shards);
  }
  return [num_shards](const Shape&, int64_t) { return num_shards; };
}

Partitioner min_size_partitioner(int64_t min_shard_bytes, int64_t max_shards) {
  if (min_shard_bytes < 1 || max_shards < 1) {
    throw_error<InvalidArgumentError>("min_size_partitioner",
                                      "min_shard_bytes={} and max_shards={} must be >= 1",
                                      min_shard_bytes, max_shards);
  }
  return [=](const Shape& shape, int64_t element_bytes) {
    const int64_t fit = total_bytes(shape, element_bytes) / min_shard_bytes;
    return std::clamp<int64_t>(fit, 1, max_shards);
  };
}

Partitioner max_size_partitioner(int64_t max_shard_bytes, int64_t max_shards) {
  if (max_shard_bytes < 1 || max_shards < 0) {
    throw_error<InvalidArgumentError>("max_size_partitioner",
                                      "max_shard_bytes={} must be >= 1 and max_shards={} >= 0",
                                      max_shard_bytes, max_shards);
  }
  return [=](const Shape& shape, int64_t element_bytes) {
    const int64_t bytes = total_bytes(shape, element_bytes);
    int64_t k = std::max<int64_t>(1, (bytes + max_shard_bytes - 1) / max_shard_bytes);
    if (max_shards > 0) k = std::min(k, max_shards);
    return k;
  };
}

std::vector<RowRange> shard_rows(int64_t rows, int64_t num_shards) {
  if (num_shards < 1 || num_shards > std::max<int64_t>(rows, 1)) {
    throw_error<InvalidArgumentError>("shard_rows", "cannot split {} rows into {} shards", rows,
                                      num_shards);
  }
  std::vector<RowRange> out;
  int64_t offset = 0;
  for (int64_t i = 0; i < num_shards; ++i) {
    const int64_t n = rows / num_shards + (i < rows % num_shards ? 1 : 0);
    out.push_back({offset, n});
    offset += n;
  }
  return out;
}

int64_t num_shards(const Partitioner& partitioner, const Shape& shape, int64_t element_bytes) {
  if (shape.empty() || !partitioner) return 1;
  return std::clamp<int64_t>(partitioner(shape, element_bytes), 1, std::max<int64_t>(shape[0], 1));
}

}  // namespace dtensor::ps
