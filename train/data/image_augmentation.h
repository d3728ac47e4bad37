// ImageAugmentation: a seeded sequence of image stages (crops, flips, brightness and contrast
// jitter, standardisation) applied to every example a Dataset reads (Dataset::augment), as in
// TensorFlow's CIFAR-10 tutorial (cifar10_input.py).
//
// Images are f32 [height, width, channels] (NHWC examples without the N). Stages run in the
// order they were added. The random stages draw from a counter-based generator keyed by
// (seed, epoch, example index), in stage order, so an example's augmentation is the same on
// every mesh, every process and every run, whichever device reads it, and changes from epoch to
// epoch. Values are not clipped after brightness or contrast (neither does the tutorial).
//
// Argument mistakes throw InvalidArgumentError when a stage is added; an image the stages do not
// fit (not rank 3, smaller than a crop) throws ShapeError from output_shape() and apply(),
// naming the stage.
//
// Ownership: a plain value (the list of stages). Thread-safety: const methods may run
// concurrently; apply() keeps no state between calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/shape.h"

namespace dtensor::data {

class ImageAugmentation {
 public:
  explicit ImageAugmentation(uint64_t seed = 0) : seed_(seed) {}

  // Each returns *this for chaining.
  // A height x width window at a random offset (each offset uniform over the positions that fit).
  ImageAugmentation& random_crop(int64_t height, int64_t width);
  // The height x width window at offset ((H - height) / 2, (W - width) / 2), rounded down.
  ImageAugmentation& central_crop(int64_t height, int64_t width);
  // Mirrors the columns with probability 1/2.
  ImageAugmentation& random_flip_left_right();
  // Adds one delta, uniform in [-max_delta, max_delta), to every value (max_delta >= 0).
  ImageAugmentation& random_brightness(float max_delta);
  // Per channel c with mean m_c over the image: x -> (x - m_c) * f + m_c, one factor f uniform in
  // [lower, upper) for all channels (0 <= lower <= upper).
  ImageAugmentation& random_contrast(float lower, float upper);
  // x -> (x - mean) / max(stddev, 1 / sqrt(N)) over the N values of the image (population
  // stddev), as tf.image.per_image_standardization.
  ImageAugmentation& standardize();

  bool empty() const { return stages_.empty(); }
  uint64_t seed() const { return seed_; }

  // The shape of an output image for an input image of shape `input`. ShapeError (message
  // starting with `function`) unless `input` is [H, W, C] with every dim >= 1 and each crop
  // fits the image it gets.
  Shape output_shape(const Shape& input,
                     const char* function = "ImageAugmentation::output_shape") const;

  // Augments `count` images of shape `input`, stored one after another at `in`, into `out`
  // (count * num_elements(output_shape(input)) floats; may not overlap `in`). Image j is example
  // `examples[j]` of epoch `epoch`: that pair (and the seed) decides its random draws.
  void apply(const Shape& input, const float* in, int64_t count, const int64_t* examples,
             int64_t epoch, float* out) const;

 private:
  enum class Kind { kRandomCrop, kCentralCrop, kFlip, kBrightness, kContrast, kStandardize };
  struct Stage {
    Kind kind;
    double a = 0, b = 0;  // crop: height, width; brightness: max delta; contrast: lower, upper
  };

  uint64_t seed_;
  std::vector<Stage> stages_;
};

// The tutorial's training pipeline for 32x32x3 CIFAR-10 images with values in [0, 1]: random
// 24x24 crop, random horizontal flip, brightness (max delta 63/255), contrast [0.2, 1.8),
// standardisation.
ImageAugmentation cifar10_train_augmentation(uint64_t seed);
// The tutorial's evaluation pipeline: central 24x24 crop, standardisation (nothing random).
ImageAugmentation cifar10_eval_augmentation();

}  // namespace dtensor::data
