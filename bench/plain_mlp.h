// The seed MLP's training step written by hand: OpenBLAS calls and plain loops on flat arrays,
// no layouts, dispatch or tape. bench/train_step runs it next to the runtime's step, so the
// runtime's figure can be read against what the machine gives the same arithmetic that day.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::bench {

class PlainMlp {
 public:
  // Layer sizes (784, 700, 500, 10) and the batch; weights small and deterministic.
  PlainMlp(std::vector<int> sizes, int batch);
  // Forward, softmax cross-entropy, backward and Adam (lr 1e-3); returns the loss.
  float step(const float* images, const int32_t* labels);

 private:
  std::vector<int> sizes_;
  int batch_;
  int64_t t_ = 0;
  // Per layer: weights, bias, their gradients and Adam's two slots for both.
  std::vector<std::vector<float>> w_, b_, dw_, db_, mw_, vw_, mb_, vb_;
  std::vector<std::vector<float>> act_;  // act_[0] unused; act_[l] the output of layer l
};

}  // namespace dtensor::bench
