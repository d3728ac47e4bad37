#include "train/data/image_augmentation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/error.h"
#include "train/data/internal/rng.h"

namespace dtensor::data {

namespace {

void check_crop(int64_t height, int64_t width, const char* fn) {
  if (height < 1 || width < 1) {
    throw_error<InvalidArgumentError>(fn, "size {}x{} must be at least 1x1", height, width);
  }
}

// Moves the height x width window at (top, left) of an [H, W, C] image to its front, in place:
// every destination lies at or before its source, so forward row copies never overwrite a row
// still to be read.
void crop_in_place(float* image, const Shape& shape, int64_t top, int64_t left, int64_t height,
                   int64_t width) {
  const int64_t w = shape[1], c = shape[2];
  for (int64_t y = 0; y < height; ++y) {
    std::memmove(image + y * width * c, image + ((top + y) * w + left) * c,
                 static_cast<size_t>(width * c) * sizeof(float));
  }
}

void flip_in_place(float* image, const Shape& shape) {
  const int64_t h = shape[0], w = shape[1], c = shape[2];
  for (int64_t y = 0; y < h; ++y) {
    float* row = image + y * w * c;
    for (int64_t x = 0; x < w / 2; ++x) {
      std::swap_ranges(row + x * c, row + (x + 1) * c, row + (w - 1 - x) * c);
    }
  }
}

void contrast_in_place(float* image, const Shape& shape, double factor) {
  const int64_t pixels = shape[0] * shape[1], c = shape[2];
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int64_t p = 0; p < pixels; ++p) sum += image[p * c + ch];
    const double mean = sum / static_cast<double>(pixels);
    for (int64_t p = 0; p < pixels; ++p) {
      float& v = image[p * c + ch];
      v = static_cast<float>((v - mean) * factor + mean);
    }
  }
}

void standardize_in_place(float* image, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += image[i];
  const double mean = sum / static_cast<double>(n);
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += (image[i] - mean) * (image[i] - mean);
  const double stddev = std::sqrt(squares / static_cast<double>(n));
  const double scale = 1.0 / std::max(stddev, 1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) image[i] = static_cast<float>((image[i] - mean) * scale);
}

}  // namespace

ImageAugmentation& ImageAugmentation::random_crop(int64_t height, int64_t width) {
  check_crop(height, width, "ImageAugmentation::random_crop");
  stages_.push_back({Kind::kRandomCrop, static_cast<double>(height), static_cast<double>(width)});
  return *this;
}

ImageAugmentation& ImageAugmentation::central_crop(int64_t height, int64_t width) {
  check_crop(height, width, "ImageAugmentation::central_crop");
  stages_.push_back({Kind::kCentralCrop, static_cast<double>(height), static_cast<double>(width)});
  return *this;
}

ImageAugmentation& ImageAugmentation::random_flip_left_right() {
  stages_.push_back({Kind::kFlip});
  return *this;
}

ImageAugmentation& ImageAugmentation::random_brightness(float max_delta) {
  if (!(max_delta >= 0) || !std::isfinite(max_delta)) {
    throw_error<InvalidArgumentError>("ImageAugmentation::random_brightness",
                                      "max_delta {} must be finite and at least 0", max_delta);
  }
  stages_.push_back({Kind::kBrightness, max_delta});
  return *this;
}

ImageAugmentation& ImageAugmentation::random_contrast(float lower, float upper) {
  if (!(lower >= 0 && lower <= upper) || !std::isfinite(upper)) {
    throw_error<InvalidArgumentError>("ImageAugmentation::random_contrast",
                                      "range [{}, {}) needs finite 0 <= lower <= upper", lower,
                                      upper);
  }
  stages_.push_back({Kind::kContrast, lower, upper});
  return *this;
}

ImageAugmentation& ImageAugmentation::standardize() {
  stages_.push_back({Kind::kStandardize});
  return *this;
}

Shape ImageAugmentation::output_shape(const Shape& input, const char* function) const {
  if (input.size() != 3 ||
      std::any_of(input.begin(), input.end(), [](int64_t d) { return d < 1; })) {
    throw_error<ShapeError>(function, "image shape {} is not [height, width, channels]",
                            shape_to_string(input));
  }
  Shape shape = input;
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    if (s.kind != Kind::kRandomCrop && s.kind != Kind::kCentralCrop) continue;
    const auto height = static_cast<int64_t>(s.a), width = static_cast<int64_t>(s.b);
    if (height > shape[0] || width > shape[1]) {
      throw_error<ShapeError>(function, "stage {} ({} {}x{}) does not fit image {}", i,
                              s.kind == Kind::kRandomCrop ? "random_crop" : "central_crop", height,
                              width, shape_to_string(shape));
    }
    shape[0] = height;
    shape[1] = width;
  }
  return shape;
}

void ImageAugmentation::apply(const Shape& input, const float* in, int64_t count,
                              const int64_t* examples, int64_t epoch, float* out) const {
  const Shape output = output_shape(input, "ImageAugmentation::apply");
  const int64_t in_size = num_elements(input), out_size = num_elements(output);
  // One image at a time, in place: crops only shrink it.
  std::vector<float> image(static_cast<size_t>(in_size));
  for (int64_t j = 0; j < count; ++j) {
    std::memcpy(image.data(), in + j * in_size, static_cast<size_t>(in_size) * sizeof(float));
    internal::Rng rng(seed_, static_cast<uint64_t>(epoch), static_cast<uint64_t>(examples[j]));
    Shape shape = input;
    for (const Stage& s : stages_) {
      switch (s.kind) {
        case Kind::kRandomCrop:
        case Kind::kCentralCrop: {
          const auto height = static_cast<int64_t>(s.a), width = static_cast<int64_t>(s.b);
          int64_t top = (shape[0] - height) / 2, left = (shape[1] - width) / 2;
          if (s.kind == Kind::kRandomCrop) {
            top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(shape[0] - height + 1)));
            left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(shape[1] - width + 1)));
          }
          crop_in_place(image.data(), shape, top, left, height, width);
          shape[0] = height;
          shape[1] = width;
          break;
        }
        case Kind::kFlip:
          if (rng.uniform() < 0.5) flip_in_place(image.data(), shape);
          break;
        case Kind::kBrightness: {
          const auto delta = static_cast<float>(rng.uniform(-s.a, s.a));
          const int64_t n = num_elements(shape);
          for (int64_t i = 0; i < n; ++i) image[static_cast<size_t>(i)] += delta;
          break;
        }
        case Kind::kContrast:
          contrast_in_place(image.data(), shape, rng.uniform(s.a, s.b));
          break;
        case Kind::kStandardize:
          standardize_in_place(image.data(), num_elements(shape));
          break;
      }
    }
    std::memcpy(out + j * out_size, image.data(), static_cast<size_t>(out_size) * sizeof(float));
  }
}

ImageAugmentation cifar10_train_augmentation(uint64_t seed) {
  ImageAugmentation augmentation(seed);
  augmentation.random_crop(24, 24)
      .random_flip_left_right()
      .random_brightness(63.0f / 255.0f)
      .random_contrast(0.2f, 1.8f)
      .standardize();
  return augmentation;
}

ImageAugmentation cifar10_eval_augmentation() {
  ImageAugmentation augmentation;
  augmentation.central_crop(24, 24).standardize();
  return augmentation;
}

}  // namespace dtensor::data
