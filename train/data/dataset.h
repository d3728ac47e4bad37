// Dataset: an in-memory input pipeline that yields global batches as batch-sharded DTensors (TF
// DTensor's DTensorDataset over tf.data's shuffle / batch / repeat / prefetch).
//
// The examples are the rows of `features` (f32 [N, ...]) and `labels` (i32 [N]), or those of an
// ExampleSource (example_source.h), such as MNIST files read on demand. An epoch visits
// every example once, in order or, after shuffle(seed), in a permutation drawn from seed + epoch
// (the same on every process and every run). Batch b of an epoch holds the examples at positions
// [b*B, min((b+1)*B, N)) of that order, B being the global batch size; with drop_remainder the
// last, shorter batch is left out. Features come out as Layout::batch_sharded(mesh, batch_dim,
// rank) and labels as Layout::batch_sharded(mesh, batch_dim, 1): device d gets the rows of its
// chunk (Layout::shard_range, so a short last batch has shorter or empty last shards), copied
// straight from the example rows it owns. Devices that differ only along other mesh dims share one
// buffer. On a GPU mesh (or the emulated GPU) each chunk is assembled in host memory and copied
// onto every device that holds it (dtensor/host_copy.h on_device, one copy per device), on the
// prefetch thread when prefetching, so the next batches' copies overlap the current step.
// In a multi-process mesh every process configures its Dataset identically and reads
// only the examples of its local devices: from memory when every process holds the tensors, from
// disk for a file source (each process then reads its own part of the files).
//
// The position is (epoch, batch index) of the next batch; state() and restore() save and resume
// it (with the same configuration) for checkpoints. Configuration methods may be called at any
// time and keep the position; a batch index past the end of an epoch moves on to the next epoch.
//
// Ownership: the Dataset shares the storage of `features` and `labels` (no copy), or the source,
// and reads it while it lives, from its prefetch thread too: do not write to them meanwhile.
// Batches own their shards and stay valid after the Dataset is gone. Movable, not copyable; a
// moved-from Dataset may only be destroyed or assigned to.
//
// Thread-safety: not thread-safe; call the methods of one Dataset from one thread at a time
// (const methods may run concurrently with each other). With prefetch(k > 0) one internal thread
// assembles up to k batches ahead: every method that changes the configuration or the position,
// and the destructor, stop and join it before returning, even mid-epoch. An exception thrown while
// assembling a batch (the map function's, or bad_alloc) is rethrown by the next() that would have
// returned that batch; the position stays at that batch, so calling next() again retries it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dtensor/dtensor.h"
#include "train/data/example_source.h"
#include "train/data/image_augmentation.h"

namespace dtensor::data {

// The rows of `features` (f32 [N, ...]) and `labels` (i32 [N]) as a source, sharing their storage.
// Throws as the Dataset constructor below does for the tensors, naming tensor_examples.
std::shared_ptr<const ExampleSource> tensor_examples(Tensor features, Tensor labels);

struct Batch {
  DTensor features;  // f32 [size, ...], batch-sharded along the dataset's batch dim
  DTensor labels;    // i32 [size], batch-sharded likewise
  int64_t size = 0;  // examples in this batch (global), B except for a short last batch
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
};

class Dataset {
 public:
  struct State {
    int64_t epoch = 0;  // epoch of the next batch
    int64_t batch = 0;  // its index within the epoch
    friend bool operator==(const State& a, const State& b) {
      return a.epoch == b.epoch && a.batch == b.batch;
    }
    friend bool operator!=(const State& a, const State& b) { return !(a == b); }
  };

  // Called with each freshly assembled local shard of a batch (features, labels: handles to new
  // buffers in host memory, before a GPU mesh's copies) and may change their values in place:
  // normalisation, augmentation. Runs on the prefetch thread when prefetching, never
  // concurrently with itself.
  using MapFn = std::function<void(Tensor features, Tensor labels)>;

  // Throws DTypeError unless features are f32 and labels i32, ShapeError unless labels are [N]
  // for features [N, ...], InvalidArgumentError if `mesh` has no dim `batch_dim` or the tensors
  // are not on the CPU. A mesh of GPU devices without a GPU backend fails at its first batch.
  Dataset(Tensor features, Tensor labels, Mesh mesh, std::string batch_dim);
  // Over any source; the mesh errors as above, InvalidArgumentError for a null source.
  Dataset(std::shared_ptr<const ExampleSource> examples, Mesh mesh, std::string batch_dim);
  ~Dataset();
  Dataset(Dataset&&) noexcept;
  Dataset& operator=(Dataset&&) noexcept;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // Configuration; each returns *this for chaining.
  // Visits each epoch in a fresh permutation: epoch e uses seed + e.
  Dataset& shuffle(uint64_t seed);
  // Global batch size (InvalidArgumentError unless >= 1); required before next() and restore().
  Dataset& batch(int64_t global_batch_size, bool drop_remainder = false);
  // Number of epochs: 1 by default, -1 for ever (InvalidArgumentError below -1).
  Dataset& repeat(int64_t epochs = -1);
  // Keeps every example in memory once it was read, so later epochs read nothing from the
  // source (tf.data's cache()). A process keeps only the examples it reads: those of its own
  // devices. Nothing to do for examples already in memory (ExampleSource::is_cached).
  Dataset& cache();
  // Assembles up to `depth` batches ahead on a background thread; 0 (the default) assembles in
  // next(). InvalidArgumentError for a negative depth.
  Dataset& prefetch(int64_t depth);
  // Applies `fn` to every local shard of every batch (an empty fn removes it).
  Dataset& map(MapFn fn);
  // Augments every example as it is read (before map): example i of epoch e gets the draws of
  // (augmentation.seed(), e, i), whichever device reads it, so batches are the same on every
  // mesh. Features take the augmented shape ([24, 24, 3] after a 24x24 crop). An augmentation
  // without stages removes it. ShapeError, naming Dataset::augment, if the examples are not
  // images the stages fit (see ImageAugmentation::output_shape).
  Dataset& augment(ImageAugmentation augmentation);

  // The next batch, or nullopt once the last epoch is done (or when an epoch has no batches).
  // InvalidArgumentError if batch() was not called.
  std::optional<Batch> next();

  int64_t num_examples() const;
  // Batches in one epoch under the current configuration (0 until batch() is called).
  int64_t batches_per_epoch() const;
  const Mesh& mesh() const;
  const std::string& batch_dim() const;

  // The position of the next batch.
  State state() const;
  // Resumes at `state`. InvalidArgumentError for a negative position, a batch index past the end
  // of an epoch, or before batch() was called.
  void restore(State state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtensor::data
