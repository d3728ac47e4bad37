// Partitioners (fixed shards, min size, max size) and the rows of each shard.
#include "train/ps/partitioner.h"

#include <catch2/catch.hpp>

#include "runtime/error.h"

using namespace dtensor;
using namespace dtensor::ps;
using Catch::Matchers::Message;

TEST_CASE("shard_rows gives the first rows % k shards one row more") {
  const std::vector<RowRange> r = shard_rows(10, 3);
  REQUIRE(r.size() == 3);
  CHECK((r[0].offset == 0 && r[0].rows == 4));
  CHECK((r[1].offset == 4 && r[1].rows == 3));
  CHECK((r[2].offset == 7 && r[2].rows == 3));
  CHECK(shard_rows(1, 1).at(0).rows == 1);
  CHECK_THROWS_MATCHES(shard_rows(2, 3), InvalidArgumentError,
                       Message("[shard_rows] cannot split 2 rows into 3 shards"));
  CHECK_THROWS_MATCHES(shard_rows(5, 0), InvalidArgumentError,
                       Message("[shard_rows] cannot split 5 rows into 0 shards"));
}

TEST_CASE("fixed_shards_partitioner: k shards, at most one per row") {
  const Partitioner p = fixed_shards_partitioner(3);
  CHECK(num_shards(p, {784, 256}, 4) == 3);
  CHECK(num_shards(p, {2, 256}, 4) == 2);
  CHECK(num_shards(p, {}, 4) == 1);
  CHECK(num_shards({}, {784, 256}, 4) == 1);
  CHECK_THROWS_MATCHES(fixed_shards_partitioner(0), InvalidArgumentError,
                       Message("[fixed_shards_partitioner] num_shards=0 must be >= 1"));
}

TEST_CASE("min_size_partitioner keeps shards at least min_shard_bytes") {
  const Partitioner p = min_size_partitioner(/*min_shard_bytes=*/256 << 10, /*max_shards=*/4);
  CHECK(num_shards(p, {784, 256}, 4) == 3);    // 784 KiB: three shards of >= 256 KiB
  CHECK(num_shards(p, {10, 10}, 4) == 1);      // smaller than one shard
  CHECK(num_shards(p, {4096, 1024}, 4) == 4);  // 16 MiB, capped at 4
  CHECK_THROWS_MATCHES(min_size_partitioner(0, 2), InvalidArgumentError,
                       Message("[min_size_partitioner] min_shard_bytes=0 and max_shards=2 must be "
                               ">= 1"));
}

TEST_CASE("max_size_partitioner keeps shards at most max_shard_bytes") {
  const Partitioner p = max_size_partitioner(/*max_shard_bytes=*/100 << 10);
  CHECK(num_shards(p, {784, 256}, 4) == 8);    // 784 KiB / 100 KiB, rounded up
  CHECK(num_shards(p, {3, 1 << 20}, 4) == 3);  // a shard is at least one row
  CHECK(num_shards(max_size_partitioner(100 << 10, 2), {784, 256}, 4) == 2);
  CHECK(num_shards(p, {256}, 4) == 1);
  CHECK_THROWS_MATCHES(max_size_partitioner(10, -1), InvalidArgumentError,
                       Message("[max_size_partitioner] max_shard_bytes=10 must be >= 1 and "
                               "max_shards=-1 >= 0"));
}
