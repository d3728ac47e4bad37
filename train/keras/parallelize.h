// parallelize: parallel styles applied to a model's layers by path (PyTorch's
// parallelize_module), the per-layer counterpart of TransformerLM::parallelize.
//
//   Mesh mesh = Mesh::create({{"data", 2}, {"model", 4}}, DeviceType::kCPU);
//   keras::MirroredStrategy strategy(mesh, "data");
//   std::optional<keras::Sequential> mlp;
//   {
//     auto scope = strategy.scope();
//     mlp.emplace(64, std::vector<keras::Dense>{keras::Dense(256, relu, "fc1"),
//                                               keras::Dense(64, {}, "fc2")});
//   }
//   keras::parallelize(*mlp, mesh, {{"fc1", keras::ColwiseParallel()},
//                                   {"fc2", keras::RowwiseParallel()}});
//
// Keys are layer paths (train/keras/layer.h: "fc1", "block0/fc1"), exact or glob patterns: `*`
// stands for any characters but '/', `?` for one ("block*/fc?"). A layer matched exactly takes
// that entry; otherwise at most one pattern may match it. Every key must match some layer.
//
// The whole plan is checked before anything moves (unknown keys, a layer matched by two patterns,
// a style that does not fit its layer, a mesh dim the mesh lacks, an unbuilt layer, variables on
// another mesh: InvalidArgumentError or MeshError naming "parallelize", the layer, its variables'
// shapes and layouts); then each matched layer's variables are relaid out (apply_style). Shapes
// need not divide the mesh dim: uneven shards follow chunk semantics.
//
// Not thread-safe; call before an optimizer has slots for the model's variables.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "train/keras/layer.h"

namespace dtensor::keras {

using ParallelizePlan = std::vector<std::pair<std::string, ParallelStyle>>;

void parallelize(Layer& root, const Mesh& mesh, const ParallelizePlan& plan);
// `root` itself in `style`.
void parallelize(Layer& layer, const Mesh& mesh, const ParallelStyle& style);

// Whether `path` matches glob `pattern` (`*`: any run of characters but '/', `?`: one).
bool path_matches(const std::string& pattern, const std::string& path);

}  // namespace dtensor::keras
