// The training and test sets of examples/cifar10:train and the augmentation each gets:
//   - CIFAR-10 binaries (--data_dir): the tutorial's pipelines, random 24x24 crop, flip,
//     brightness, contrast and standardisation for training, central crop and standardisation for
//     evaluation (train/data/image_augmentation.h);
//   - Fashion-MNIST (IDX files): 28x28x1 images in [0, 1], not augmented: the garments are
//     centred and upright in every image, the test set like the training set, so crops and
//     brightness jitter would only make the task harder than the one being measured, and the
//     CNN reaches 0.90 without them (it overfits later, which is what --epochs bounds);
//   - without files, the built-in synthetic set (synthetic_images.h), 32x32x3, with the CIFAR-10
//     pipelines so the whole path runs.
// Errors: IoError for missing or bad files (from the readers), naming the files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/data/example_source.h"
#include "train/data/image_augmentation.h"
#include "train/data/mnist_dir.h"

namespace dtensor::examples {

struct DataOptions {
  std::string dataset;   // "cifar10" or "fashion_mnist"
  std::string data_dir;  // empty: cifar10 -> synthetic, fashion_mnist -> the Debian folder
  int64_t train_limit = -1, test_limit = -1;  // first N examples (-1: all; synthetic: defaults)
  uint64_t seed = 0;
};

using data::kFashionMnistDir;  // where the Debian package dataset-fashion-mnist puts it

struct Splits {
  std::shared_ptr<const data::ExampleSource> train, test;
  data::ImageAugmentation train_augmentation, test_augmentation;  // empty: none
  Shape image_shape;  // [h, w, c] of the model's input (after augmentation)
  int64_t classes = 10;
  std::string description;
};

Splits load_splits(const DataOptions& options);

}  // namespace dtensor::examples
