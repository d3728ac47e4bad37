#include "examples/cifar10/synthetic_images.h"

#include <cmath>

#include "train/data/dataset.h"

namespace dtensor::examples {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) from a counter: the draws do not depend on the platform's distributions.
double uniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(mix(seed ^ mix(counter)) >> 11) * 0x1.0p-53;
}

}  // namespace

std::shared_ptr<const data::ExampleSource> synthetic_images(int64_t n, uint64_t seed) {
  constexpr int64_t kSide = 32, kChannels = 3, kPixels = kSide * kSide * kChannels;
  Tensor images = Tensor::empty({n, kSide, kSide, kChannels}, DType::kF32);
  Tensor labels = Tensor::empty({n}, DType::kI32);
  float* px = images.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t key = mix(seed) ^ static_cast<uint64_t>(i) * 0x100000001b3ull;
    const int32_t label = static_cast<int32_t>((i + static_cast<int64_t>(mix(seed) % 10)) % 10);
    labels.data<int32_t>()[i] = label;
    // The class decides the stripes' angle, spatial frequency and colour mix.
    const double angle = M_PI * label / 10.0;
    const double freq = 0.25 + 0.06 * (label % 4);
    const double phase = 2 * M_PI * uniform(key, 1);
    const double dx = std::cos(angle) * freq, dy = std::sin(angle) * freq;
    for (int64_t y = 0; y < kSide; ++y) {
      for (int64_t x = 0; x < kSide; ++x) {
        const double wave =
            std::sin(dx * static_cast<double>(x) + dy * static_cast<double>(y) + phase);
        for (int64_t c = 0; c < kChannels; ++c) {
          const double weight = 0.5 + 0.5 * std::cos(2 * M_PI * (label + 3.0 * c) / 10.0);
          const int64_t at = ((y * kSide) + x) * kChannels + c;
          const double noise = uniform(key, 2 + static_cast<uint64_t>(at)) - 0.5;
          const double v = 0.5 + 0.3 * weight * wave + 0.35 * noise;
          px[i * kPixels + at] = static_cast<float>(v < 0 ? 0 : (v > 1 ? 1 : v));
        }
      }
    }
  }
  return data::tensor_examples(images, labels);
}

}  // namespace dtensor::examples
