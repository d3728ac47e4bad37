#include "train/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/error.h"
#include "train/data/internal/batch_assembler.h"
#include "train/data/internal/prefetcher.h"

namespace dtensor::data {

namespace {

void check_examples(const Tensor& features, const Tensor& labels, const char* fn) {
  if (features.dtype() != DType::kF32) {
    throw_error<DTypeError>(fn, "features are {}, expected f32", features.to_string());
  }
  if (labels.dtype() != DType::kI32) {
    throw_error<DTypeError>(fn, "labels are {}, expected i32", labels.to_string());
  }
  if (features.rank() < 1) {
    throw_error<ShapeError>(fn, "features {} have no example dim", features.to_string());
  }
  if (labels.shape() != Shape{features.dim(0)}) {
    throw_error<ShapeError>(fn, "labels {} must be [{}] for features {}", labels.to_string(),
                            features.dim(0), features.to_string());
  }
  for (const Tensor* t : {&features, &labels}) {
    if (t->device().type != DeviceType::kCPU) {
      throw_error<InvalidArgumentError>(fn, "{} is not on the CPU", t->to_string());
    }
  }
}

// Examples in memory: rows of two tensors.
class TensorExamples final : public ExampleSource {
 public:
  TensorExamples(Tensor features, Tensor labels)
      : features_(std::move(features)),
        labels_(std::move(labels)),
        example_(features_.shape().begin() + 1, features_.shape().end()),
        row_(num_elements(example_)) {}

  int64_t num_examples() const override { return labels_.dim(0); }
  const Shape& example_shape() const override { return example_; }
  bool is_cached() const override { return true; }

  void read(const int64_t* ids, int64_t count, float* features, int32_t* labels) const override {
    const float* x = features_.data<float>();
    const int32_t* y = labels_.data<int32_t>();
    // Runs of consecutive examples (all of an unshuffled batch) are one copy.
    for (int64_t j = 0; j < count;) {
      int64_t run = 1;
      while (j + run < count && ids[j + run] == ids[j] + run) ++run;
      std::memcpy(features + j * row_, x + ids[j] * row_,
                  static_cast<size_t>(run * row_) * sizeof(float));
      std::memcpy(labels + j, y + ids[j], static_cast<size_t>(run) * sizeof(int32_t));
      j += run;
    }
  }

 private:
  Tensor features_, labels_;
  Shape example_;
  int64_t row_;
};

// Another source's examples, each kept in memory after its first read.
class CachedExamples final : public ExampleSource {
 public:
  explicit CachedExamples(std::shared_ptr<const ExampleSource> inner)
      : inner_(std::move(inner)),
        row_(num_elements(inner_->example_shape())),
        slot_(static_cast<size_t>(inner_->num_examples()), -1) {}

  int64_t num_examples() const override { return inner_->num_examples(); }
  const Shape& example_shape() const override { return inner_->example_shape(); }
  bool is_cached() const override { return true; }

  void read(const int64_t* ids, int64_t count, float* features, int32_t* labels) const override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int64_t> missing;
    for (int64_t j = 0; j < count; ++j) {
      if (slot_[static_cast<size_t>(ids[j])] < 0) missing.push_back(ids[j]);
    }
    std::sort(missing.begin(), missing.end());  // runs of consecutive ids read as one
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
    if (!missing.empty()) {
      const int64_t m = static_cast<int64_t>(missing.size());
      const size_t first = labels_.size();
      features_.resize((first + missing.size()) * static_cast<size_t>(row_));
      labels_.resize(first + missing.size());
      inner_->read(missing.data(), m, features_.data() + first * static_cast<size_t>(row_),
                   labels_.data() + first);
      for (int64_t i = 0; i < m; ++i) {
        slot_[static_cast<size_t>(missing[static_cast<size_t>(i)])] =
            static_cast<int64_t>(first) + i;
      }
    }
    for (int64_t j = 0; j < count; ++j) {
      const int64_t at = slot_[static_cast<size_t>(ids[j])];
      std::memcpy(features + j * row_, features_.data() + at * row_,
                  static_cast<size_t>(row_) * sizeof(float));
      labels[j] = labels_[static_cast<size_t>(at)];
    }
  }

 private:
  std::shared_ptr<const ExampleSource> inner_;
  int64_t row_;
  mutable std::mutex mu_;
  mutable std::vector<int64_t> slot_;  // per example: its index in the store, or -1
  mutable std::vector<float> features_;
  mutable std::vector<int32_t> labels_;
};

std::shared_ptr<const internal::Source> make_source(std::shared_ptr<const ExampleSource> examples,
                                                    Mesh mesh, std::string batch_dim) {
  const char* fn = "Dataset";
  if (examples == nullptr) throw_error<InvalidArgumentError>(fn, "the example source is null");
  if (!mesh.has_dim(batch_dim)) {
    throw_error<InvalidArgumentError>(fn, "mesh {} has no dim '{}'", mesh.dims_string(), batch_dim);
  }
  const int64_t rank = 1 + static_cast<int64_t>(examples->example_shape().size());
  Layout feature_layout = Layout::batch_sharded(mesh, batch_dim, rank);
  Layout label_layout = Layout::batch_sharded(mesh, batch_dim, 1);
  return std::make_shared<const internal::Source>(
      internal::Source{std::move(examples), std::move(mesh), std::move(batch_dim),
                       std::move(feature_layout), std::move(label_layout)});
}

}  // namespace

std::shared_ptr<const ExampleSource> tensor_examples(Tensor features, Tensor labels) {
  check_examples(features, labels, "tensor_examples");
  return std::make_shared<const TensorExamples>(std::move(features), std::move(labels));
}

struct Dataset::Impl {
  std::shared_ptr<const internal::Source> source;
  internal::Config config;
  State position;
  std::optional<internal::BatchAssembler> assembler;  // next() without prefetching
  std::unique_ptr<internal::Prefetcher> prefetcher;   // last: stopped first

  int64_t num_examples() const { return source->examples->num_examples(); }
  // Drops everything built under the old configuration or position (joins the prefetch thread).
  void reset_pipeline() {
    prefetcher.reset();
    assembler.reset();
  }
};

Dataset::Dataset(Tensor features, Tensor labels, Mesh mesh, std::string batch_dim)
    : impl_(std::make_unique<Impl>()) {
  check_examples(features, labels, "Dataset");
  impl_->source =
      make_source(std::make_shared<const TensorExamples>(std::move(features), std::move(labels)),
                  std::move(mesh), std::move(batch_dim));
}

Dataset::Dataset(std::shared_ptr<const ExampleSource> examples, Mesh mesh, std::string batch_dim)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = make_source(std::move(examples), std::move(mesh), std::move(batch_dim));
}

Dataset::~Dataset() = default;
Dataset::Dataset(Dataset&&) noexcept = default;
Dataset& Dataset::operator=(Dataset&&) noexcept = default;

Dataset& Dataset::shuffle(uint64_t seed) {
  impl_->reset_pipeline();
  impl_->config.shuffle_seed = seed;
  return *this;
}

Dataset& Dataset::batch(int64_t global_batch_size, bool drop_remainder) {
  if (global_batch_size < 1) {
    throw_error<InvalidArgumentError>("Dataset::batch", "global batch size {} must be at least 1",
                                      global_batch_size);
  }
  impl_->reset_pipeline();
  impl_->config.batch_size = global_batch_size;
  impl_->config.drop_remainder = drop_remainder;
  return *this;
}

Dataset& Dataset::repeat(int64_t epochs) {
  if (epochs < -1) {
    throw_error<InvalidArgumentError>("Dataset::repeat",
                                      "epochs {} must be -1 (for ever) or at least 0", epochs);
  }
  impl_->reset_pipeline();
  impl_->config.epochs = epochs;
  return *this;
}

Dataset& Dataset::cache() {
  const internal::Source& old = *impl_->source;
  if (old.examples->is_cached()) return *this;
  impl_->reset_pipeline();
  impl_->source = std::make_shared<const internal::Source>(
      internal::Source{std::make_shared<const CachedExamples>(old.examples), old.mesh,
                       old.batch_dim, old.feature_layout, old.label_layout});
  return *this;
}

Dataset& Dataset::prefetch(int64_t depth) {
  if (depth < 0) {
    throw_error<InvalidArgumentError>("Dataset::prefetch", "depth {} must be at least 0", depth);
  }
  impl_->reset_pipeline();
  impl_->config.prefetch_depth = depth;
  return *this;
}

Dataset& Dataset::map(MapFn fn) {
  impl_->reset_pipeline();
  impl_->config.map = std::move(fn);
  return *this;
}

Dataset& Dataset::augment(ImageAugmentation augmentation) {
  internal::Config& config = impl_->config;
  if (augmentation.empty()) {
    impl_->reset_pipeline();
    config.augmentation.reset();
    return *this;
  }
  Shape shape =
      augmentation.output_shape(impl_->source->examples->example_shape(), "Dataset::augment");
  impl_->reset_pipeline();
  config.augmentation = std::make_shared<const ImageAugmentation>(std::move(augmentation));
  config.augmented_shape = std::move(shape);
  return *this;
}

std::optional<Batch> Dataset::next() {
  Impl& m = *impl_;
  if (m.config.batch_size == 0) {
    throw_error<InvalidArgumentError>("Dataset::next",
                                      "no batch size: call batch(global_batch_size) first");
  }
  if (!internal::normalize(m.position, m.num_examples(), m.config)) {
    m.reset_pipeline();
    return std::nullopt;
  }
  if (m.config.prefetch_depth == 0) {
    if (!m.assembler) m.assembler.emplace(m.source, m.config);
    Batch batch = m.assembler->build(m.position.epoch, m.position.batch);
    ++m.position.batch;
    return batch;
  }
  if (!m.prefetcher) {
    m.prefetcher = std::make_unique<internal::Prefetcher>(
        internal::BatchAssembler(m.source, m.config), m.num_examples(), m.config, m.position,
        m.config.prefetch_depth);
  }
  std::optional<Batch> batch;
  try {
    batch = m.prefetcher->pop();
  } catch (...) {
    m.prefetcher.reset();  // it has ended; the next call retries from the same position
    throw;
  }
  DTENSOR_CHECK(batch && batch->epoch == m.position.epoch && batch->index == m.position.batch);
  m.position.batch = batch->index + 1;
  return batch;
}

int64_t Dataset::num_examples() const { return impl_->num_examples(); }

int64_t Dataset::batches_per_epoch() const {
  return internal::batches_per_epoch(impl_->num_examples(), impl_->config);
}

const Mesh& Dataset::mesh() const { return impl_->source->mesh; }

const std::string& Dataset::batch_dim() const { return impl_->source->batch_dim; }

Dataset::State Dataset::state() const {
  State state = impl_->position;
  internal::normalize(state, impl_->num_examples(), impl_->config);
  return state;
}

void Dataset::restore(State state) {
  const char* fn = "Dataset::restore";
  const internal::Config& config = impl_->config;
  if (config.batch_size == 0) {
    throw_error<InvalidArgumentError>(fn, "no batch size: call batch(global_batch_size) first");
  }
  if (state.epoch < 0 || state.batch < 0) {
    throw_error<InvalidArgumentError>(fn, "position (epoch {}, batch {}) is negative", state.epoch,
                                      state.batch);
  }
  const int64_t per_epoch = batches_per_epoch();
  if (state.batch > 0 && state.batch >= per_epoch) {
    throw_error<InvalidArgumentError>(
        fn,
        "batch {} is past the end of an epoch of {} batches ({} examples, global batch size {}{})",
        state.batch, per_epoch, impl_->num_examples(), config.batch_size,
        config.drop_remainder ? ", remainder dropped" : "");
  }
  impl_->reset_pipeline();
  impl_->position = state;
}

}  // namespace dtensor::data
