// The model the crash test's saver checkpoints: values that are a function of the step, so that
// whichever checkpoint survives can be checked bit for bit.
#pragma once

#include <cstdint>

#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"

namespace dtensor::checkpoint_testing {

struct CrashModel {
  Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  // 2 MB, so that a save takes a few milliseconds and kills land inside it.
  DVariable big{zeros({1000, 500}, Layout::batch_sharded(mesh, "batch", 2)), "big"};
  DVariable replicated{zeros({37, 5}, Layout::replicated(mesh, 2)), "replicated"};
  DVariable uneven{zeros({13, 7}, Layout::inner_sharded(mesh, "batch", 2)), "uneven"};
  int64_t step = -1;
  Checkpoint checkpoint;

  CrashModel() {
    checkpoint.add_variables("model", {big, replicated, uneven});
    checkpoint.add_int("step", &step);
  }

  // The values of step `s`, in any layout.
  static DTensor value(const DVariable& v, int64_t s, uint64_t k) {
    return random_uniform(v.shape(), v.layout(), static_cast<uint64_t>(s) * 16 + k);
  }
  void set(int64_t s) {
    big.assign(value(big, s, 0));
    replicated.assign(value(replicated, s, 1));
    uneven.assign(value(uneven, s, 2));
    step = s;
  }
  bool holds(int64_t s) const {
    return step == s && bitwise_equal(to_global(big.value()), to_global(value(big, s, 0))) &&
           bitwise_equal(to_global(replicated.value()), to_global(value(replicated, s, 1))) &&
           bitwise_equal(to_global(uneven.value()), to_global(value(uneven, s, 2)));
  }
};

}  // namespace dtensor::checkpoint_testing
