// The CNN of TensorFlow's CIFAR-10 tutorial (cifar10.py's inference()) over a mesh whose first dim
// shards the batch: the towers of cifar10_multi_gpu_train.py are the devices along it, each on its
// slice of the batch, the weights replicated, the gradients averaged by the reduction of their
// partial sums (one per variable per step, in the optimizer).
//
//   conv1  5x5, 64 filters, stride 1, SAME, ReLU          weights N(0, 0.05) truncated, bias 0
//   pool1  max 3x3, stride 2, SAME
//   norm1  local response normalisation (depth_radius 4, bias 1, alpha 0.001 / 9, beta 0.75)
//   conv2  5x5, 64 filters, stride 1, SAME, ReLU          weights N(0, 0.05) truncated, bias 0.1
//   norm2  as norm1
//   pool2  max 3x3, stride 2, SAME
//   local3 dense 384, ReLU                                weights N(0, 0.04) truncated, bias 0.1
//   local4 dense 192, ReLU                                weights N(0, 0.04) truncated, bias 0.1
//   softmax_linear dense 10 (logits)                      weights N(0, 1/192) truncated, bias 0
//
// The tutorial's weight decay (0.004) applies to local3's and local4's weights:
// decayed_variables() lists them. Weights come from the counter-based generator, so the same
// seed gives the same model on any mesh.
//
// Owns its variables (DVariable handles); not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/variable.h"

namespace dtensor::examples {

class Cifar10Cnn {
 public:
  // Images of shape [height, width, channels]: [24, 24, 3] after the CIFAR-10 crops, [28, 28, 1]
  // for Fashion-MNIST.
  Cifar10Cnn(const Mesh& mesh, const Shape& image_shape, int64_t classes, uint64_t seed);

  // Logits [batch, classes] for images [batch, height, width, channels] or, flattened,
  // [batch, height * width * channels], batch-sharded along the mesh's first dim.
  DTensor operator()(const DTensor& images) const;

  const std::vector<DVariable>& variables() const { return variables_; }
  // local3's and local4's weights, which the tutorial decays.
  std::vector<DVariable> decayed_variables() const;

 private:
  Shape image_shape_;
  std::vector<DVariable> variables_;  // conv1 w, b, conv2 w, b, local3 w, b, local4 ..., softmax
};

}  // namespace dtensor::examples
