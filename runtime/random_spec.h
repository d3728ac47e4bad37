// What a random fill draws: distribution, seed and its two parameters. A plain value shared by
// runtime/random.h and the fill kernels behind runtime/element_loops.h.
#pragma once

#include <cstdint>

namespace dtensor {

enum class RandomDistribution : uint8_t { kUniform, kNormal, kTruncatedNormal };

struct RandomSpec {
  RandomDistribution distribution = RandomDistribution::kUniform;
  uint64_t seed = 0;
  double a = 0.0;  // uniform: minval; normal/truncated: mean
  double b = 1.0;  // uniform: maxval; normal/truncated: stddev
};

// The user-facing function of a distribution, which its errors name ("[random_uniform] ...").
constexpr const char* random_function_name(RandomDistribution distribution) {
  switch (distribution) {
    case RandomDistribution::kUniform:
      return "random_uniform";
    case RandomDistribution::kNormal:
      return "random_normal";
    case RandomDistribution::kTruncatedNormal:
      break;
  }
  return "truncated_normal";
}

}  // namespace dtensor
