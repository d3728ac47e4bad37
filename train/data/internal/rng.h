// Internal: a small counter-based generator whose streams are the same on every platform (the
// standard distributions are not). Not thread-safe; cheap to create one per task.
#pragma once

#include <cstdint>

namespace dtensor::data::internal {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  // Independent streams for distinct (seed, stream, index) triples.
  Rng(uint64_t seed, uint64_t stream, uint64_t index)
      : state_(splitmix64(seed ^ splitmix64(stream ^ splitmix64(index)))) {}

  uint64_t next() { return splitmix64(state_++); }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform in [0, k) for k >= 1, without modulo bias.
  uint64_t below(uint64_t k) {
    const uint64_t threshold = (0 - k) % k;
    for (;;) {
      const uint64_t x = next();
      if (x >= threshold) return x % k;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace dtensor::data::internal
