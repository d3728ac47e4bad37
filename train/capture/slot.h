// Slot: where a replayed program keeps one value between its calls: a DTensor, or the bare
// shards a collective returned (train/capture/program.h). ValueMeta: how a call saw a value.
//
// Plain values; the program owns its slots. Thread-safety: none (one replay at a time).
#pragma once

#include <optional>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::capture {

// Shape, dtype and layout of a value as a call saw it while tracing.
struct ValueMeta {
  Shape shape;
  DType dtype;
  Layout layout;

  static ValueMeta of(const DTensor& x) { return {x.shape(), x.dtype(), x.layout()}; }
  bool matches(const DTensor& x) const {
    return x.dtype() == dtype && x.shape() == shape && x.layout() == layout;
  }
  friend bool operator==(const ValueMeta& a, const ValueMeta& b) {
    return a.dtype == b.dtype && a.shape == b.shape && a.layout == b.layout;
  }
  friend bool operator!=(const ValueMeta& a, const ValueMeta& b) { return !(a == b); }
};

struct Slot {
  std::optional<DTensor> value;
  std::vector<Tensor> shards;
  const std::vector<Tensor>& shards_of() const { return value ? value->shards() : shards; }
};

}  // namespace dtensor::capture
