// GatherMeter: the bytes of a model's gathered weight copies (FSDP's all-gathers) that are still
// alive, counted on one device, and their peak over a step.
//
// A weight stored sharded (fully_shard) is all-gathered where a layer uses it; the copy lives as
// long as something holds it (the tape, for backward, unless the plan reshards after forward).
// The meter keeps a handle on each copy's shard of local device 0 and, at every new gather,
// drops the copies no one else holds any more and adds up the rest: gathers are the moments the
// live bytes grow, so the largest sum seen is the peak. Its own handle keeps a dead copy's buffer
// until the next gather (the count leaves it out).
//
// Thread-safe: FSDP's prefetch (train/parallel/prefetch.h) notes the copies it gathers on its own
// thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/variable.h"

namespace dtensor::parallel {

class GatherMeter {
 public:
  // Notes a gathered copy (a DTensor with local devices) and updates the peak.
  void gathered(const DTensor& copy);
  // Bytes of the copies alive now, on local device 0.
  int64_t live_bytes();
  // The largest live_bytes() seen at a gather since construction or reset().
  int64_t peak_bytes() const;
  void reset();

 private:
  int64_t live_bytes_locked();
  mutable std::mutex mu_;
  std::vector<Tensor> held_;
  int64_t peak_ = 0;
};

// Bytes of `vars` on local device 0 (each variable's shard there).
int64_t resident_bytes(const std::vector<DVariable>& vars);

}  // namespace dtensor::parallel
