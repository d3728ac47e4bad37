// Slot: where a replayed program keeps one value between its calls: a DTensor, or the bare
// shards a collective returned (train/capture/program.h).
//
// A plain value; the program owns its slots. Thread-safety: none (one replay at a time).
#pragma once

#include <optional>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::capture {

struct Slot {
  std::optional<DTensor> value;
  std::vector<Tensor> shards;
  const std::vector<Tensor>& shards_of() const { return value ? value->shards() : shards; }
};

}  // namespace dtensor::capture
