#include "examples/cifar10/data.h"

#include <algorithm>

#include "examples/cifar10/synthetic_images.h"
#include "runtime/error.h"
#include "train/data/cifar10.h"
#include "train/data/idx.h"

namespace dtensor::examples {
namespace {

// The first `limit` examples of a source (all when limit < 0).
class FirstExamples final : public data::ExampleSource {
 public:
  FirstExamples(std::shared_ptr<const data::ExampleSource> source, int64_t limit)
      : source_(std::move(source)),
        n_(limit < 0 ? source_->num_examples() : std::min(limit, source_->num_examples())) {}
  int64_t num_examples() const override { return n_; }
  const Shape& example_shape() const override { return source_->example_shape(); }
  void read(const int64_t* ids, int64_t count, float* features, int32_t* labels) const override {
    source_->read(ids, count, features, labels);
  }
  bool is_cached() const override { return source_->is_cached(); }

 private:
  std::shared_ptr<const data::ExampleSource> source_;
  int64_t n_;
};

}  // namespace

Splits load_splits(const DataOptions& o) {
  Splits s;
  if (o.dataset == "fashion_mnist") {
    const std::string dir = o.data_dir.empty() ? kFashionMnistDir : o.data_dir;
    data::MnistDirSplits splits = data::open_mnist_dir(dir, o.train_limit, o.test_limit, "train");
    s.train = splits.train;
    s.test = splits.test;
    s.image_shape = {28, 28, 1};
    s.description = "Fashion-MNIST (" + dir + ")";
    return s;
  }
  s.train_augmentation = data::cifar10_train_augmentation(o.seed);
  s.test_augmentation = data::cifar10_eval_augmentation();
  s.image_shape = {24, 24, 3};
  if (o.data_dir.empty()) {
    s.train = synthetic_images(o.train_limit > 0 ? o.train_limit : 2048, o.seed);
    s.test = synthetic_images(o.test_limit > 0 ? o.test_limit : 512, o.seed + 1);
    s.description = "synthetic 32x32x3 images";
    return s;
  }
  s.train = std::make_shared<FirstExamples>(
      data::open_cifar10_examples(o.data_dir, data::Cifar10Split::kTrain), o.train_limit);
  s.test = std::make_shared<FirstExamples>(
      data::open_cifar10_examples(o.data_dir, data::Cifar10Split::kTest), o.test_limit);
  s.description = "CIFAR-10 (" + o.data_dir + ")";
  return s;
}

}  // namespace dtensor::examples
