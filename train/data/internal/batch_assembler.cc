#include "train/data/internal/batch_assembler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "dtensor/host_copy.h"
#include "train/data/internal/rng.h"

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
  const int64_t n = src.examples->num_examples();
  const int64_t begin = index * config_.batch_size;
  const int64_t size = std::min(config_.batch_size, n - begin);
  if (config_.shuffle_seed && order_epoch_ != epoch) {
    order_ = shuffled_order(n, *config_.shuffle_seed, epoch);
    order_epoch_ = epoch;
  }

  Shape feature_shape{size};
  const Shape& example =
      config_.augmentation ? config_.augmented_shape : src.examples->example_shape();
  feature_shape.insert(feature_shape.end(), example.begin(), example.end());
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
      // Assembled in host memory: a CPU device's own, CPU:0 for a GPU, whose shards are copies.
      const Device host = device.type == DeviceType::kCPU ? device : Device{DeviceType::kCPU, 0};
      Tensor features = Tensor::empty(shard_shape, DType::kF32, host);
      Tensor labels = Tensor::empty({rows.size}, DType::kI32, host);
      copy_rows(epoch, begin + rows.offset, rows.size, features, labels);
      if (config_.map) config_.map(features, labels);
      it = chunks.insert(chunks.end(), {rows, {features, labels}});
    }
    feature_shards.push_back(on_device(it->second.first, device));
    label_shards.push_back(on_device(it->second.second, device));
  }
  return Batch{DTensor::from_trusted_shards(feature_shape, DType::kF32, src.feature_layout,
                                            std::move(feature_shards)),
               DTensor::from_trusted_shards(label_shape, DType::kI32, src.label_layout,
                                            std::move(label_shards)),
               size, epoch, index};
}

void BatchAssembler::copy_rows(int64_t epoch, int64_t begin, int64_t count, Tensor& features,
                               Tensor& labels) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  if (order_.empty()) {
    std::iota(ids.begin(), ids.end(), begin);
  } else {
    std::copy_n(order_.begin() + begin, count, ids.begin());
  }
  const ExampleSource& examples = *source_->examples;
  if (!config_.augmentation) {
    examples.read(ids.data(), count, features.data<float>(), labels.data<int32_t>());
    return;
  }
  const Shape& raw = examples.example_shape();
  unaugmented_.resize(static_cast<size_t>(count * num_elements(raw)));
  examples.read(ids.data(), count, unaugmented_.data(), labels.data<int32_t>());
  config_.augmentation->apply(raw, unaugmented_.data(), count, ids.data(), epoch,
                              features.data<float>());
}

}  // namespace dtensor::data::internal
