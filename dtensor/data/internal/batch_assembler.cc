#include "dtensor/data/internal/batch_assembler.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "dtensor/data/internal/rng.h"

namespace dtensor::data::internal {

int64_t batches_per_epoch(int64_t num_examples, const Config& config) {
  const int64_t b = config.batch_size;
  if (b <= 0) return 0;
  return config.drop_remainder ? num_examples / b : (num_examples + b - 1) / b;
}

bool normalize(Dataset::State& state, int64_t num_examples, const Config& config) {
  const int64_t per_epoch = batches_per_epoch(num_examples, config);
  if (per_epoch == 0) return false;
  if (state.batch >= per_epoch) state = {state.epoch + 1, 0};
  return config.epochs < 0 || state.epoch < config.epochs;
}

std::vector<int64_t> shuffled_order(int64_t num_examples, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(num_examples));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng(seed + static_cast<uint64_t>(epoch), /*stream=*/0x5348, /*index=*/0);
  for (int64_t i = num_examples - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[static_cast<size_t>(i)], order[rng.below(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

Batch BatchAssembler::build(int64_t epoch, int64_t index) {
  const Source& src = *source_;
  const Mesh& mesh = src.mesh;
  const int64_t n = src.labels.dim(0);
  const int64_t begin = index * config_.batch_size;
  const int64_t size = std::min(config_.batch_size, n - begin);
  if (config_.shuffle_seed && order_epoch_ != epoch) {
    order_ = shuffled_order(n, *config_.shuffle_seed, epoch);
    order_epoch_ = epoch;
  }

  Shape feature_shape = src.features.shape();
  feature_shape[0] = size;
  const Shape label_shape{size};
  // Devices that differ only along other mesh dims hold the same rows: one buffer per chunk.
  std::vector<std::pair<ShardRange, std::pair<Tensor, Tensor>>> chunks;
  std::vector<Tensor> feature_shards, label_shards;
  for (int64_t id : mesh.local_device_ids()) {
    const Device device = mesh_device(mesh, id);
    const ShardRange rows = src.label_layout.shard_range(label_shape, 0, id);
    auto it = std::find_if(chunks.begin(), chunks.end(), [&](const auto& c) {
      return c.first.offset == rows.offset && c.first.size == rows.size;
    });
    if (it == chunks.end()) {
      Shape shard_shape = feature_shape;
      shard_shape[0] = rows.size;
      Tensor features = Tensor::empty(shard_shape, DType::kF32, device);
      Tensor labels = Tensor::empty({rows.size}, DType::kI32, device);
      copy_rows(begin + rows.offset, rows.size, features, labels);
      if (config_.map) config_.map(features, labels);
      it = chunks.insert(chunks.end(), {rows, {features, labels}});
    }
    feature_shards.push_back(it->second.first.with_device(device));
    label_shards.push_back(it->second.second.with_device(device));
  }
  return Batch{DTensor::from_trusted_shards(feature_shape, DType::kF32, src.feature_layout,
                                            std::move(feature_shards)),
               DTensor::from_trusted_shards(label_shape, DType::kI32, src.label_layout,
                                            std::move(label_shards)),
               size, epoch, index};
}

void BatchAssembler::copy_rows(int64_t begin, int64_t count, Tensor& features,
                               Tensor& labels) const {
  const Source& src = *source_;
  const int64_t n = src.labels.dim(0);
  const int64_t row = n == 0 ? 0 : src.features.num_elements() / n;
  const float* x = src.features.data<float>();
  const int32_t* y = src.labels.data<int32_t>();
  float* out_x = features.data<float>();
  int32_t* out_y = labels.data<int32_t>();
  if (order_.empty()) {  // in order: one contiguous block
    if (count == 0) return;
    std::memcpy(out_x, x + begin * row, static_cast<size_t>(count * row) * sizeof(float));
    std::memcpy(out_y, y + begin, static_cast<size_t>(count) * sizeof(int32_t));
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    const int64_t example = order_[static_cast<size_t>(begin + j)];
    std::memcpy(out_x + j * row, x + example * row, static_cast<size_t>(row) * sizeof(float));
    out_y[j] = y[example];
  }
}

}  // namespace dtensor::data::internal
