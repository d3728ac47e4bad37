// The seed's MLP (784-700-500-10, ReLU, Xavier-uniform weights, zero biases) over a mesh.
//
// On a mesh with only a batch dim the weights are replicated and the data batch-sharded (data
// parallel). With a `model` dim as well, the hidden layers are sharded Megatron-style: the first
// weight by columns (its output is sharded over `model`), the second by rows (its output is a
// partial sum over `model`, reduced once before the bias), the classifier replicated.
#pragma once

#include <string>
#include <vector>

#include "dtensor/variable.h"

namespace dtensor::examples {

class Mlp {
 public:
  Mlp(const Mesh& mesh, const std::vector<int64_t>& sizes, uint64_t seed);

  // Logits [batch, classes] for images [batch, 784].
  DTensor operator()(const DTensor& images) const;

  const std::vector<DVariable>& variables() const { return variables_; }
  // Layout for a batch of rank `rank` (rows sharded over the batch dim).
  Layout batch_layout(int64_t rank) const;

 private:
  Mesh mesh_;
  std::string batch_dim_;
  std::vector<DVariable> variables_;  // w0, b0, w1, b1, ...
};

}  // namespace dtensor::examples
