#include "train/parallel/gather_meter.h"

#include <algorithm>

namespace dtensor::parallel {

void GatherMeter::gathered(const DTensor& copy) {
  if (copy.mesh().num_local_devices() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  held_.push_back(copy.shard(0));
  peak_ = std::max(peak_, live_bytes_locked());
}

int64_t GatherMeter::live_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_locked();
}

int64_t GatherMeter::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

int64_t GatherMeter::live_bytes_locked() {
  // holders() == 1: only this meter's handle is left.
  held_.erase(
      std::remove_if(held_.begin(), held_.end(), [](const Tensor& t) { return t.holders() == 1; }),
      held_.end());
  int64_t bytes = 0;
  for (const Tensor& t : held_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

void GatherMeter::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  held_.clear();
  peak_ = 0;
}

int64_t resident_bytes(const std::vector<DVariable>& vars) {
  int64_t bytes = 0;
  for (const DVariable& v : vars) {
    const DTensor value = v.value();
    if (value.mesh().num_local_devices() > 0) {
      bytes += static_cast<int64_t>(value.shard(0).nbytes());
    }
  }
  return bytes;
}

}  // namespace dtensor::parallel
