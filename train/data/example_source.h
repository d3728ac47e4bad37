// ExampleSource: where a Dataset's examples come from.
//
// A source holds N examples, each a features array of one shape (f32) and an i32 label, and reads
// any of them on request. A Dataset asks only for the examples its process's devices receive, so
// a source that reads from files (open_mnist_examples in idx.h) makes each process of a
// multi-process job read only its own part. Tensors already in memory are a source as well
// (tensor_examples in dataset.h).
//
// Thread-safety: implementations are immutable once built, and read() may run on several
// threads at once (a Dataset's prefetch thread reads while the caller holds the source).
#pragma once

#include <cstdint>

#include "runtime/shape.h"

namespace dtensor::data {

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual int64_t num_examples() const = 0;
  // The shape of one example's features ([784] for an MNIST image).
  virtual const Shape& example_shape() const = 0;
  // Writes examples ids[0..count) (each in [0, num_examples())) one after another: their
  // features to `features` (count * num_elements(example_shape()) floats) and their labels to
  // `labels`. Throws (IoError for a file that fails) and leaves the outputs unspecified.
  virtual void read(const int64_t* ids, int64_t count, float* features,
                    int32_t* labels) const = 0;
  // True if reading an example again costs no I/O (it is in memory, or cached): Dataset::cache()
  // leaves such a source as it is.
  virtual bool is_cached() const { return false; }
};

}  // namespace dtensor::data
