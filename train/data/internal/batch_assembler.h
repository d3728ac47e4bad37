// Internal to Dataset: the configuration, positions, and the assembly of one batch's shards.
//
// A BatchAssembler builds batch (epoch, index) from the shared, read-only Source; it caches the
// current epoch's order, so one assembler belongs to one thread at a time (the consumer, or the
// prefetch thread). Sources are immutable and may be shared by any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/data/dataset.h"

namespace dtensor::data::internal {

// The examples and where their batches go; never changes after construction.
struct Source {
  std::shared_ptr<const ExampleSource> examples;
  Mesh mesh;
  std::string batch_dim;
  Layout feature_layout;  // batch_sharded(mesh, batch_dim, 1 + example rank)
  Layout label_layout;    // batch_sharded(mesh, batch_dim, 1)
};

struct Config {
  std::optional<uint64_t> shuffle_seed;
  int64_t batch_size = 0;  // 0: not set yet
  bool drop_remainder = false;
  int64_t epochs = 1;  // -1: for ever
  int64_t prefetch_depth = 0;
  Dataset::MapFn map;
  // Null unless augmenting; then examples come out as augmented_shape (same rank as the source's).
  std::shared_ptr<const ImageAugmentation> augmentation;
  Shape augmented_shape;
};

int64_t batches_per_epoch(int64_t num_examples, const Config& config);

// Moves a batch index past the end of its epoch to the start of the next epoch. Returns false if
// the position is past the last epoch (or epochs have no batches): the stream is over.
bool normalize(Dataset::State& state, int64_t num_examples, const Config& config);

// The order in which epoch `epoch` visits the examples: a permutation drawn from seed + epoch.
std::vector<int64_t> shuffled_order(int64_t num_examples, uint64_t seed, int64_t epoch);

class BatchAssembler {
 public:
  BatchAssembler(std::shared_ptr<const Source> source, Config config)
      : source_(std::move(source)), config_(std::move(config)) {}

  // Batch `index` of `epoch`, which must be a valid position.
  Batch build(int64_t epoch, int64_t index);

 private:
  // Reads the examples at order positions [begin, begin + count) of `epoch` into fresh shards.
  void copy_rows(int64_t epoch, int64_t begin, int64_t count, Tensor& features, Tensor& labels);

  std::shared_ptr<const Source> source_;
  Config config_;
  int64_t order_epoch_ = -1;        // the epoch whose order is cached
  std::vector<int64_t> order_;      // empty when not shuffling
  std::vector<float> unaugmented_;  // the examples as read, when augmenting
};

}  // namespace dtensor::data::internal
