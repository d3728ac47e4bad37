// Philox4x32-10 fills on the host: the CPU half of kernels::fill_random (see runtime/random.h).
#include "runtime/element_loops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "runtime/error.h"

namespace dtensor::kernels::cpu {
namespace {

using Counter = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

// Philox4x32 constants from the paper: round multipliers and Weyl key increments.
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// Counter word 2: which layout of draws the counter feeds (see random.h).
constexpr uint32_t kElementStream = 0;  // one Philox output per element
constexpr uint32_t kPackedStream = 1;   // one 32-bit word per element, four elements per output

inline Counter philox(Counter c, Key k) {
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kPhiloxM0} * c[0];
    const uint64_t p1 = uint64_t{kPhiloxM1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
  }
  return c;
}

inline uint32_t lo32(uint64_t x) { return static_cast<uint32_t>(x); }
inline uint32_t hi32(uint64_t x) { return static_cast<uint32_t>(x >> 32); }
inline uint64_t join(uint32_t hi, uint32_t lo) { return (uint64_t{hi} << 32) | lo; }

inline Counter element_counter(uint64_t g, uint32_t retry) {
  return {lo32(g), hi32(g), kElementStream, retry};
}

// Uniform in [0, 1) from the top bits of the words; the "open" variants give (0, 1] for log().
inline float unit_f32(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }
inline float unit_f32_open(uint32_t w) { return static_cast<float>((w >> 8) + 1) * 0x1p-24f; }
inline double unit_f64(uint32_t hi, uint32_t lo) {
  return static_cast<double>(join(hi, lo) >> 11) * 0x1p-53;
}
inline double unit_f64_open(uint32_t hi, uint32_t lo) {
  return static_cast<double>((join(hi, lo) >> 11) + 1) * 0x1p-53;
}

// Box-Muller, keeping the cosine branch only so that each element uses its own counter.
inline float standard_normal(const Counter& w, float) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  return std::sqrt(-2.0f * std::log(unit_f32_open(w[0]))) * std::cos(kTwoPi * unit_f32(w[1]));
}
inline double standard_normal(const Counter& w, double) {
  constexpr double kTwoPi = 6.28318530717958647692;
  return std::sqrt(-2.0 * std::log(unit_f64_open(w[0], w[1]))) *
         std::cos(kTwoPi * unit_f64(w[2], w[3]));
}

// The arithmetic type of a dtype's values: bf16 is computed in f32 and rounded.
template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Draws come in two kinds: packed ones map one 32-bit word to a value, element ones run their own
// Philox calls for global index g.
template <typename T>
struct UniformReal32 {  // f32, bf16
  static constexpr bool kPacked = true;
  float lo, scale, below_hi;
  T operator()(uint32_t w) const {
    // min() is the guard against lo + scale * u rounding up to hi.
    return static_cast<T>(std::min(lo + scale * unit_f32(w), below_hi));
  }
};

struct UniformF64 {
  static constexpr bool kPacked = false;
  double lo, scale, below_hi;
  double operator()(uint64_t g, const Key& key) const {
    const Counter w = philox(element_counter(g, 0), key);
    return std::min(lo + scale * unit_f64(w[0], w[1]), below_hi);
  }
};

struct UniformI32 {
  static constexpr bool kPacked = true;
  int64_t lo;
  uint64_t range;  // in [1, 2^32]
  int32_t operator()(uint32_t w) const {
    return static_cast<int32_t>(lo + static_cast<int64_t>((uint64_t{w} * range) >> 32));
  }
};

struct UniformI64 {
  static constexpr bool kPacked = false;
  uint64_t lo;
  uint64_t range;  // 0 stands for 2^64
  int64_t operator()(uint64_t g, const Key& key) const {
    const Counter w = philox(element_counter(g, 0), key);
    const uint64_t r = join(w[0], w[1]);
    const uint64_t step =
        range == 0 ? r : static_cast<uint64_t>((static_cast<unsigned __int128>(r) * range) >> 64);
    return static_cast<int64_t>(lo + step);
  }
};

template <typename T, bool kTruncated>
struct Normal {
  static constexpr bool kPacked = false;
  Compute<T> mean, stddev;
  T operator()(uint64_t g, const Key& key) const {
    Compute<T> z;
    uint32_t retry = 0;
    do {
      z = standard_normal(philox(element_counter(g, retry++), key), Compute<T>{});
    } while (kTruncated && std::abs(z) > Compute<T>{2});
    return static_cast<T>(mean + stddev * z);
  }
};

// Calls fn(local_start, global_index, length) for each innermost row of the shard.
template <typename Fn>
void for_each_row(const Shape& shard, const Shape& global, const std::vector<int64_t>& offset,
                  Fn&& fn) {
  const int64_t count = num_elements(shard);
  if (count == 0) return;
  const size_t rank = shard.size();
  if (rank == 0) return fn(int64_t{0}, uint64_t{0}, int64_t{1});
  const int64_t inner = shard[rank - 1];
  const std::vector<int64_t> global_strides = row_major_strides(global);
  std::vector<int64_t> index(rank - 1, 0);  // odometer over the outer dims
  for (int64_t start = 0; start < count; start += inner) {
    int64_t g = offset[rank - 1];
    for (size_t d = 0; d + 1 < rank; ++d) g += (offset[d] + index[d]) * global_strides[d];
    fn(start, static_cast<uint64_t>(g), inner);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shard[d]) break;
      index[d] = 0;
    }
  }
}

template <typename T, typename Draw>
void fill_with(Tensor& shard, const Shape& global, const std::vector<int64_t>& offset,
               const Key& key, const Draw& draw) {
  T* data = shard.data<T>();
  for_each_row(shard.shape(), global, offset, [&](int64_t start, uint64_t g, int64_t n) {
    T* out = data + start;
    const uint64_t end = g + static_cast<uint64_t>(n);
    if constexpr (Draw::kPacked) {
      while (g < end) {
        const Counter w = philox({lo32(g >> 2), hi32(g >> 2), kPackedStream, 0}, key);
        if ((g & 3) == 0 && end - g >= 4) {  // a whole block: the common case
          for (int j = 0; j < 4; ++j) out[j] = draw(w[j]);
          out += 4;
          g += 4;
          continue;
        }
        for (unsigned j = g & 3; j < 4 && g < end; ++j, ++g) *out++ = draw(w[j]);
      }
    } else {
      for (; g < end; ++g) *out++ = draw(g, key);
    }
  });
}

// `x` rounded to T's values, in T's arithmetic type; infinite when out of range.
template <typename T>
Compute<T> round_to(double x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    if (!(std::abs(x) <= std::numeric_limits<float>::max()))
      return x > 0 ? std::numeric_limits<float>::infinity()
                   : -std::numeric_limits<float>::infinity();
    const float f = static_cast<float>(x);
    if constexpr (std::is_same_v<T, BFloat16>) return static_cast<float>(BFloat16(f));
    return f;
  }
}

// The largest value of T below the finite value x of T.
template <typename T>
Compute<T> next_below(Compute<T> x) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    BFloat16 v(x);
    if ((v.bits & 0x7fffu) == 0) {
      v.bits = 0x8001u;  // +-0: the smallest negative subnormal
    } else if (v.bits & 0x8000u) {
      ++v.bits;
    } else {
      --v.bits;
    }
    return static_cast<float>(v);
  } else {
    return std::nextafter(x, -std::numeric_limits<Compute<T>>::infinity());
  }
}

template <typename T>
void fill_uniform(Tensor& shard, const Shape& global, const std::vector<int64_t>& offset,
                  const Key& key, double a, double b) {
  const char* fn = "random_uniform";
  const std::string_view name = dtype_name(dtype_of<T>());
  if constexpr (std::is_integral_v<T>) {
    if (a != std::floor(a) || b != std::floor(b))
      throw_error<InvalidArgumentError>(
          fn, "minval and maxval must be integers for {}, got {} and {}", name, a, b);
    constexpr double kMin = static_cast<double>(std::numeric_limits<T>::min());
    constexpr double kLimit = -kMin;  // max + 1, exact as a double
    if (a < kMin || b > kLimit)
      throw_error<InvalidArgumentError>(fn, "range [{}, {}) does not fit in {}", a, b, name);
    const int64_t lo = static_cast<int64_t>(a);
    const uint64_t hi_bits =
        b == 0x1p63 ? uint64_t{1} << 63 : static_cast<uint64_t>(static_cast<int64_t>(b));
    const uint64_t range = hi_bits - static_cast<uint64_t>(lo);
    if constexpr (std::is_same_v<T, int32_t>) {
      fill_with<T>(shard, global, offset, key, UniformI32{lo, range});
    } else {
      fill_with<T>(shard, global, offset, key, UniformI64{static_cast<uint64_t>(lo), range});
    }
  } else {
    const Compute<T> lo = round_to<T>(a), hi = round_to<T>(b);
    const Compute<T> scale = hi - lo;
    if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(scale))
      throw_error<InvalidArgumentError>(fn, "range [{}, {}) is empty or overflows in {}", a, b,
                                        name);
    const Compute<T> below_hi = next_below<T>(hi);
    if constexpr (std::is_same_v<T, double>) {
      fill_with<T>(shard, global, offset, key, UniformF64{lo, scale, below_hi});
    } else {
      fill_with<T>(shard, global, offset, key, UniformReal32<T>{lo, scale, below_hi});
    }
  }
}

template <typename T, bool kTruncated>
void fill_normal(Tensor& shard, const Shape& global, const std::vector<int64_t>& offset,
                 const Key& key, double mean, double stddev) {
  const char* fn = kTruncated ? "truncated_normal" : "random_normal";
  const Compute<T> m = round_to<Compute<T>>(mean), s = round_to<Compute<T>>(stddev);
  if (!std::isfinite(m) || !std::isfinite(s) || !(s > 0))
    throw_error<InvalidArgumentError>(fn, "mean {} and stddev {} are not representable in {}", mean,
                                      stddev, dtype_name(dtype_of<Compute<T>>()));
  fill_with<T>(shard, global, offset, key, Normal<T, kTruncated>{m, s});
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  return philox(counter, key);
}

void fill_random(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                 const RandomSpec& spec) {
  const Key key{lo32(spec.seed), hi32(spec.seed)};
  visit_dtype(shard.dtype(), [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      switch (spec.distribution) {
        case RandomDistribution::kUniform:
          fill_uniform<T>(shard, global_shape, offset, key, spec.a, spec.b);
          break;
        case RandomDistribution::kNormal:
          if constexpr (!std::is_integral_v<T>)
            fill_normal<T, false>(shard, global_shape, offset, key, spec.a, spec.b);
          break;
        case RandomDistribution::kTruncatedNormal:
          if constexpr (!std::is_integral_v<T>)
            fill_normal<T, true>(shard, global_shape, offset, key, spec.a, spec.b);
          break;
      }
    }
  });
}

}  // namespace dtensor::kernels::cpu
