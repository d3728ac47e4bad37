// Partitioners: how many shards a variable is split into along dim 0 (tf.distribute's
// FixedShardsPartitioner, MinSizePartitioner and MaxSizePartitioner), and the rows of each shard.
//
// A partitioner maps (shape, bytes per element) to a number of shards k, 1 <= k <= shape[0]
// (rank-0 variables are never split). Shard i holds rows [offset_i, offset_i + rows_i): the first
// shape[0] % k shards get one row more than the others (tf's split of an uneven dim 0).
//
// Values; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace dtensor::ps {

using Partitioner = std::function<int64_t(const Shape& shape, int64_t element_bytes)>;

// Exactly `num_shards` shards (fewer when dim 0 is smaller). InvalidArgumentError below 1.
Partitioner fixed_shards_partitioner(int64_t num_shards);
// As many shards as keep each at least `min_shard_bytes`, at most `max_shards`, at least 1.
// InvalidArgumentError unless both are >= 1.
Partitioner min_size_partitioner(int64_t min_shard_bytes = 256 << 10, int64_t max_shards = 1);
// As few shards as keep each at most `max_shard_bytes` (a shard is at least one row), capped at
// `max_shards` (0: no cap). InvalidArgumentError for max_shard_bytes < 1 or max_shards < 0.
Partitioner max_size_partitioner(int64_t max_shard_bytes, int64_t max_shards = 0);

struct RowRange {
  int64_t offset = 0;
  int64_t rows = 0;
};

// The shards of a dim 0 of `rows` rows split `num_shards` ways (see the header comment).
// InvalidArgumentError unless 1 <= num_shards <= max(rows, 1).
std::vector<RowRange> shard_rows(int64_t rows, int64_t num_shards);

// The number of shards `partitioner` gives a variable of `shape`, clamped to [1, max(dim 0, 1)];
// 1 for rank 0.
int64_t num_shards(const Partitioner& partitioner, const Shape& shape, int64_t element_bytes);

}  // namespace dtensor::ps
