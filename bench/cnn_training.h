// The CIFAR-10 tutorial CNN's training step (examples/cifar10: conv 5x5x64, pool, LRN, conv, LRN,
// pool, dense 384-192-10; mean cross-entropy + 0.004 L2 on local3 and local4, SGD 0.1, moving
// averages of every variable) on a fixed batch of 24x24x3 images, as bench/peers_cnn.py times
// PyTorch's: no input pipeline inside the step. For bench/cnn_step (CPU) and bench/gpu_cnn_step.
//
// Owns its model, optimizer and batch; not thread-safe (one thread steps it).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/dtensor.h"
#include "examples/cifar10/model.h"
#include "ops/precision.h"
#include "train/optim/ema.h"
#include "train/optim/optimizers.h"

namespace dtensor::bench {

class CnnTraining {
 public:
  // The model (seed 1) on `mesh`, the batch sharded along its first dim, run under `policy`.
  CnnTraining(const Mesh& mesh, int64_t batch, const Policy& policy = Policy::float32());

  // One training step (forward, backward, SGD, moving averages), under the policy.
  void step();

 private:
  Policy policy_;
  examples::Cifar10Cnn model_;
  std::vector<DVariable> vars_, decayed_;
  SGD optimizer_;
  ExponentialMovingAverage ema_;
  DTensor x_, labels_;
};

}  // namespace dtensor::bench
