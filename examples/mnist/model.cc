#include "examples/mnist/model.h"

#include <cmath>

#include "dtensor/creation.h"
#include "ops/ops.h"

namespace dtensor::examples {

Mlp::Mlp(const Mesh& mesh, const std::vector<int64_t>& sizes, uint64_t seed) : mesh_(mesh) {
  batch_dim_ = mesh.dims()[0].name;
  const bool model_parallel = mesh.has_dim("model");
  const size_t layers = sizes.size() - 1;
  for (size_t i = 0; i < layers; ++i) {
    const int64_t fan_in = sizes[i], fan_out = sizes[i + 1];
    // Megatron-style: column-parallel, then row-parallel, alternating; the classifier replicated.
    std::string w_in = Layout::kUnsharded, w_out = Layout::kUnsharded;
    if (model_parallel && i + 1 < layers) (i % 2 == 0 ? w_out : w_in) = "model";
    Layout w_layout({w_in, w_out}, mesh);
    const double limit = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));  // Xavier uniform
    variables_.emplace_back(random_uniform({fan_in, fan_out}, w_layout, seed + i, -limit, limit),
                            "dense_" + std::to_string(i) + "/kernel");
    variables_.emplace_back(zeros({fan_out}, w_layout.delete_dims({0})),
                            "dense_" + std::to_string(i) + "/bias");
  }
}

Layout Mlp::batch_layout(int64_t rank) const {
  return Layout::batch_sharded(mesh_, batch_dim_, rank);
}

DTensor Mlp::operator()(const DTensor& images) const {
  DTensor h = images;
  const size_t layers = variables_.size() / 2;
  for (size_t i = 0; i < layers; ++i) {
    h = dense(h, variables_[2 * i].value(), variables_[2 * i + 1].value(),
              i + 1 < layers ? DenseActivation::kRelu : DenseActivation::kNone);
  }
  return h;
}

}  // namespace dtensor::examples
