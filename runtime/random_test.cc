#include "runtime/random.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace dtensor;

namespace {

using Array4 = std::array<uint32_t, 4>;

constexpr RandomDistribution kUniform = RandomDistribution::kUniform;
constexpr RandomDistribution kNormal = RandomDistribution::kNormal;
constexpr RandomDistribution kTruncated = RandomDistribution::kTruncatedNormal;

Tensor fill_block(const Shape& global, const std::vector<int64_t>& offset, const Shape& local,
                  DType dtype, const RandomSpec& spec) {
  Tensor t = Tensor::empty(local, dtype);
  fill_random_shard(t, global, offset, spec);
  return t;
}

Tensor fill_whole(const Shape& global, DType dtype, const RandomSpec& spec) {
  return fill_block(global, std::vector<int64_t>(global.size(), 0), global, dtype, spec);
}

// True if `block` holds, bit for bit, the elements of `whole` at `offset + local index`.
bool block_matches(const Tensor& whole, const Tensor& block, const std::vector<int64_t>& offset) {
  const size_t size = dtype_size(whole.dtype());
  const auto* w = static_cast<const unsigned char*>(whole.raw_data());
  const auto* b = static_cast<const unsigned char*>(block.raw_data());
  const std::vector<int64_t> strides = row_major_strides(whole.shape());
  std::vector<int64_t> index(block.shape().size(), 0);
  for (int64_t i = 0; i < block.num_elements(); ++i) {
    int64_t g = 0;
    for (size_t d = 0; d < index.size(); ++d) g += (offset[d] + index[d]) * strides[d];
    if (std::memcmp(w + g * size, b + i * size, size) != 0) return false;
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < block.shape()[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

// Cut points 0 = c0 <= c1 <= ... <= n splitting one dim into `pieces` (possibly empty) ranges.
std::vector<int64_t> random_cuts(int64_t n, int pieces, std::mt19937& rng) {
  std::vector<int64_t> cuts = {0, n};
  std::uniform_int_distribution<int64_t> pick(0, n);
  for (int i = 1; i < pieces; ++i) cuts.push_back(pick(rng));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Splits `global` into a grid of uneven blocks and checks each one against the whole tensor.
void check_sharding_invariance(const Shape& global, DType dtype, const RandomSpec& spec,
                               std::mt19937& rng) {
  const Tensor whole = fill_whole(global, dtype, spec);
  const size_t rank = global.size();
  std::vector<std::vector<int64_t>> cuts(rank);
  for (size_t d = 0; d < rank; ++d) {
    cuts[d] = random_cuts(global[d], std::uniform_int_distribution<int>(1, 4)(rng), rng);
  }
  std::vector<size_t> piece(rank, 0);  // odometer over the grid of blocks
  while (true) {
    std::vector<int64_t> offset(rank), local(rank);
    for (size_t d = 0; d < rank; ++d) {
      offset[d] = cuts[d][piece[d]];
      local[d] = cuts[d][piece[d] + 1] - offset[d];
    }
    const Tensor block = fill_block(global, offset, local, dtype, spec);
    INFO("dtype " << dtype_name(dtype) << " global " << shape_to_string(global) << " offset "
                  << shape_to_string(offset) << " shard " << shape_to_string(local));
    CHECK(block_matches(whole, block, offset));
    size_t d = rank;
    while (d-- > 0) {
      if (++piece[d] + 1 < cuts[d].size()) break;
      piece[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) break;
  }
}

template <typename T>
std::vector<double> sample(DType dtype, const RandomSpec& spec, int64_t n = 100000) {
  const Tensor t = fill_whole({n}, dtype, spec);
  const T* data = t.data<T>();
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, BFloat16>) {
      values[i] = static_cast<double>(static_cast<float>(data[i]));
    } else {
      values[i] = static_cast<double>(data[i]);
    }
  }
  return values;
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double stddev_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return std::sqrt(sum / static_cast<double>(v.size()));
}

std::vector<double> sample_any(DType dtype, const RandomSpec& spec, int64_t n = 100000) {
  switch (dtype) {
    case DType::kF32:
      return sample<float>(dtype, spec, n);
    case DType::kF64:
      return sample<double>(dtype, spec, n);
    case DType::kBF16:
      return sample<BFloat16>(dtype, spec, n);
    case DType::kI32:
      return sample<int32_t>(dtype, spec, n);
    case DType::kI64:
      return sample<int64_t>(dtype, spec, n);
    case DType::kBool:
      break;
  }
  return {};
}

const DType kFloatTypes[] = {DType::kF32, DType::kF64, DType::kBF16};

}  // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        Array4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Array4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Array4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("filling shard by shard equals filling the whole tensor, bit for bit") {
  std::mt19937 rng(12345);
  const std::vector<Shape> shapes = {{}, {1}, {13}, {0, 3}, {7, 5}, {2, 9, 4}, {7, 5, 3}};
  struct Case {
    DType dtype;
    RandomSpec spec;
  };
  std::vector<Case> cases;
  for (DType dtype : kFloatTypes) {
    cases.push_back({dtype, {kUniform, 7, -2.0, 3.0}});
    cases.push_back({dtype, {kNormal, 7, 1.0, 2.0}});
    cases.push_back({dtype, {kTruncated, 7, 1.0, 2.0}});
  }
  cases.push_back({DType::kI32, {kUniform, 7, -5, 1000}});
  cases.push_back({DType::kI64, {kUniform, 7, -5, 1e15}});
  for (const Case& c : cases) {
    for (const Shape& shape : shapes) {
      for (int split = 0; split < 8; ++split)
        check_sharding_invariance(shape, c.dtype, c.spec, rng);
    }
  }
}

TEST_CASE("a shard depends only on its global position, not on the rest of the global shape") {
  // Element [1, 2] of a [4, 6] tensor has linear index 8, as does element [8] of a [24] tensor.
  const RandomSpec spec{kNormal, 99, 0.0, 1.0};
  const Tensor a = fill_block({4, 6}, {1, 2}, {1, 1}, DType::kF32, spec);
  const Tensor b = fill_block({24}, {8}, {1}, DType::kF32, spec);
  CHECK(a.data<float>()[0] == b.data<float>()[0]);
}

TEST_CASE("different seeds give different values; the same seed the same ones") {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    for (RandomDistribution dist : {kUniform, kNormal, kTruncated}) {
      if (!is_floating(dtype) && dist != kUniform) continue;
      const double b = is_floating(dtype) ? 1.0 : 1e9;
      INFO("dtype " << dtype_name(dtype) << " distribution " << static_cast<int>(dist));
      const auto base = sample_any(dtype, {dist, 1, 0.0, b}, 1000);
      CHECK(sample_any(dtype, {dist, 1, 0.0, b}, 1000) == base);
      for (uint64_t seed : {uint64_t{2}, uint64_t{1} + (uint64_t{1} << 32)}) {
        const auto other = sample_any(dtype, {dist, seed, 0.0, b}, 1000);
        int same = 0;
        for (size_t i = 0; i < base.size(); ++i) same += base[i] == other[i];
        CHECK(same < (dtype == DType::kBF16 ? 100 : 10));
      }
    }
  }
}

TEST_CASE("uniform floats lie in [a, b) with the right mean and variance") {
  for (DType dtype : kFloatTypes) {
    INFO("dtype " << dtype_name(dtype));
    const auto v = sample_any(dtype, {kUniform, 3, -2.0, 3.0});
    CHECK(*std::min_element(v.begin(), v.end()) >= -2.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 3.0);
    CHECK(mean_of(v) == Approx(0.5).margin(0.02));
    CHECK(stddev_of(v) * stddev_of(v) == Approx(25.0 / 12).epsilon(0.02));
  }
}

TEST_CASE("uniform floats never round up to b") {
  // Ranges two ulps wide, where a + (b - a) * u would round to b for u close to 1.
  const auto f32 = sample_any(DType::kF32, {kUniform, 5, 1.0, 1.0 + 0x1p-22});
  CHECK(std::set<double>(f32.begin(), f32.end()) == std::set<double>{1.0, 1.0 + 0x1p-23});
  const auto f64 = sample_any(DType::kF64, {kUniform, 5, 1.0, 1.0 + 0x1p-51});
  CHECK(std::set<double>(f64.begin(), f64.end()) == std::set<double>{1.0, 1.0 + 0x1p-52});
  // One bf16 ulp: every f32 value in [1, 1 + 2^-7) rounds to 1 or to b, so all must be 1.
  const auto bf16 = sample_any(DType::kBF16, {kUniform, 5, 1.0, 1.0 + 0x1p-7});
  CHECK(std::set<double>(bf16.begin(), bf16.end()) == std::set<double>{1.0});
  const auto negative = sample_any(DType::kBF16, {kUniform, 5, -0x1p-7, 0.0});
  CHECK(*std::max_element(negative.begin(), negative.end()) < 0.0);
}

TEST_CASE("uniform integers lie in [a, b) and hit every value") {
  for (DType dtype : {DType::kI32, DType::kI64}) {
    INFO("dtype " << dtype_name(dtype));
    const auto v = sample_any(dtype, {kUniform, 11, -3, 4}, 70000);
    std::map<double, int> counts;
    for (double x : v) ++counts[x];
    CHECK(counts.size() == 7);
    CHECK(counts.begin()->first == -3);
    CHECK(counts.rbegin()->first == 3);
    for (const auto& [value, count] : counts) CHECK(count == Approx(10000).epsilon(0.05));
  }
  // Full ranges: both signs show up and the mean is near the middle.
  const auto i32 = sample_any(DType::kI32, {kUniform, 11, -0x1p31, 0x1p31});
  CHECK(mean_of(i32) == Approx(-0.5).margin(0x1p31 * 0.02));
  CHECK(*std::min_element(i32.begin(), i32.end()) < -0x1p30);
  CHECK(*std::max_element(i32.begin(), i32.end()) > 0x1p30);
  const auto i64 = sample_any(DType::kI64, {kUniform, 11, -0x1p63, 0x1p63});
  CHECK(*std::min_element(i64.begin(), i64.end()) < -0x1p62);
  CHECK(*std::max_element(i64.begin(), i64.end()) > 0x1p62);
  const auto big = sample_any(DType::kI64, {kUniform, 11, 0x1p62, 0x1p63});
  CHECK(*std::min_element(big.begin(), big.end()) >= 0x1p62);
  CHECK(mean_of(big) == Approx(0x1.8p62).epsilon(0.01));
}

TEST_CASE("normal values have mean a and stddev b") {
  for (DType dtype : kFloatTypes) {
    INFO("dtype " << dtype_name(dtype));
    const auto v = sample_any(dtype, {kNormal, 21, 3.0, 0.5});
    CHECK(mean_of(v) == Approx(3.0).margin(0.01));
    CHECK(stddev_of(v) == Approx(0.5).epsilon(0.02));
    // Tails beyond 3 stddev exist (about 270 of 1e5 values).
    CHECK(std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x - 3.0) > 1.5; }) >
          150);
  }
}

TEST_CASE("truncated normal values lie within 2 stddev and are re-drawn, not clamped") {
  for (DType dtype : kFloatTypes) {
    INFO("dtype " << dtype_name(dtype));
    const auto v = sample_any(dtype, {kTruncated, 21, 3.0, 0.5});
    CHECK(*std::min_element(v.begin(), v.end()) >= 2.0);
    CHECK(*std::max_element(v.begin(), v.end()) <= 4.0);
    CHECK(mean_of(v) == Approx(3.0).margin(0.01));
    // Stddev of a standard normal truncated to [-2, 2].
    CHECK(stddev_of(v) == Approx(0.5 * 0.87962566).epsilon(0.02));
    // Clamping would pile up about 4.5% of the values on the bounds; bf16 rounding puts ~180 there.
    CHECK(std::count(v.begin(), v.end(), 2.0) + std::count(v.begin(), v.end(), 4.0) < 1000);
  }
  // Where the normal draw is inside the bounds it is kept; elsewhere a retry replaces it.
  const auto normal = sample_any(DType::kF64, {kNormal, 21, 3.0, 0.5});
  const auto truncated = sample_any(DType::kF64, {kTruncated, 21, 3.0, 0.5});
  int redrawn = 0;
  for (size_t i = 0; i < normal.size(); ++i) {
    if (std::abs(normal[i] - 3.0) < 0.999) {
      REQUIRE(truncated[i] == normal[i]);
    } else if (std::abs(normal[i] - 3.0) > 1.001) {
      REQUIRE(truncated[i] != normal[i]);
      ++redrawn;
    }
  }
  CHECK(redrawn == Approx(4550).epsilon(0.1));
}

TEST_CASE("fill_random_shard rejects unsupported dtypes") {
  Tensor b = Tensor::empty({2}, DType::kBool);
  CHECK_THROWS_MATCHES(fill_random_shard(b, {2}, {0}, {kUniform, 0, 0, 1}), DTypeError,
                       Catch::Message("[random_uniform] random generation does not support dtype "
                                      "bool (expected f32, f64, bf16, i32 or i64)"));
  Tensor i = Tensor::empty({2}, DType::kI32);
  CHECK_THROWS_MATCHES(fill_random_shard(i, {2}, {0}, {kNormal, 0, 0, 1}), DTypeError,
                       Catch::Message("[random_normal] random generation does not support dtype "
                                      "i32 (expected f32, f64 or bf16)"));
  Tensor l = Tensor::empty({2}, DType::kI64);
  CHECK_THROWS_MATCHES(fill_random_shard(l, {2}, {0}, {kTruncated, 0, 0, 1}), DTypeError,
                       Catch::Message("[truncated_normal] random generation does not support dtype "
                                      "i64 (expected f32, f64 or bf16)"));
}

TEST_CASE("fill_random_shard rejects shards outside the global shape") {
  Tensor t = Tensor::empty({4, 5}, DType::kF32);
  const RandomSpec uniform{kUniform, 0, 0, 1};
  CHECK_THROWS_MATCHES(
      fill_random_shard(t, {7, 5, 3}, {0, 0, 0}, uniform), ShapeError,
      Catch::Message("[random_uniform] shard shape [4,5] has rank 2 but global shape [7,5,3] has "
                     "rank 3"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(t, {7, 5}, {0}, {kNormal, 0, 0, 1}), ShapeError,
      Catch::Message("[random_normal] offset [0] has 1 entries but global shape [7,5] has rank 2"));
  CHECK_THROWS_MATCHES(fill_random_shard(t, {7, 5}, {4, 0}, {kTruncated, 0, 0, 1}), ShapeError,
                       Catch::Message("[truncated_normal] shard shape [4,5] at offset [4,0] does "
                                      "not fit in global shape [7,5] (dim 0)"));
  CHECK_THROWS_MATCHES(fill_random_shard(t, {7, 5}, {0, -1}, uniform), ShapeError,
                       Catch::Message("[random_uniform] shard shape [4,5] at offset [0,-1] does "
                                      "not fit in global shape [7,5] (dim 1)"));
  CHECK_THROWS_MATCHES(fill_random_shard(t, {7, -5}, {0, 0}, uniform), ShapeError,
                       Catch::Message("[random_uniform] negative dim in shape [7,-5]"));
}

TEST_CASE("fill_random_shard rejects bad distribution parameters") {
  Tensor f = Tensor::empty({3}, DType::kF32);
  Tensor bf = Tensor::empty({3}, DType::kBF16);
  Tensor i = Tensor::empty({3}, DType::kI32);
  Tensor l = Tensor::empty({3}, DType::kI64);
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THROWS_MATCHES(
      fill_random_shard(f, {3}, {0}, {kUniform, 0, 2, 1}), InvalidArgumentError,
      Catch::Message("[random_uniform] needs minval < maxval, got minval 2 and maxval 1"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(f, {3}, {0}, {kUniform, 0, 1, 1}), InvalidArgumentError,
      Catch::Message("[random_uniform] needs minval < maxval, got minval 1 and maxval 1"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(f, {3}, {0}, {kUniform, 0, 0, inf}), InvalidArgumentError,
      Catch::Message("[random_uniform] minval and maxval must be finite, got 0 and inf"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(f, {3}, {0}, {kUniform, 0, 1, 1 + 1e-9}), InvalidArgumentError,
      Catch::Message("[random_uniform] range [1, 1.000000001) is empty or overflows in f32"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(f, {3}, {0}, {kUniform, 0, -3e38, 3e38}), InvalidArgumentError,
      Catch::Message("[random_uniform] range [-3e+38, 3e+38) is empty or overflows in f32"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(bf, {3}, {0}, {kUniform, 0, 1, 1.001}), InvalidArgumentError,
      Catch::Message("[random_uniform] range [1, 1.001) is empty or overflows in bf16"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(i, {3}, {0}, {kUniform, 0, 0.5, 3}), InvalidArgumentError,
      Catch::Message("[random_uniform] minval and maxval must be integers for i32, got 0.5 and 3"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(i, {3}, {0}, {kUniform, 0, 0, 0x1p31 + 1}), InvalidArgumentError,
      Catch::Message("[random_uniform] range [0, 2147483649) does not fit in i32"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(l, {3}, {0}, {kUniform, 0, -0x1p64, 0}), InvalidArgumentError,
      Catch::Message("[random_uniform] range [-1.8446744073709552e+19, 0) does not fit in i64"));
  CHECK_THROWS_MATCHES(fill_random_shard(f, {3}, {0}, {kNormal, 0, 0, 0}), InvalidArgumentError,
                       Catch::Message("[random_normal] stddev must be finite and > 0, got 0"));
  CHECK_THROWS_MATCHES(fill_random_shard(f, {3}, {0}, {kTruncated, 0, 0, -1}), InvalidArgumentError,
                       Catch::Message("[truncated_normal] stddev must be finite and > 0, got -1"));
  CHECK_THROWS_MATCHES(fill_random_shard(f, {3}, {0}, {kNormal, 0, -inf, 1}), InvalidArgumentError,
                       Catch::Message("[random_normal] mean must be finite, got -inf"));
  CHECK_THROWS_MATCHES(
      fill_random_shard(bf, {3}, {0}, {kTruncated, 0, 0, 1e-50}), InvalidArgumentError,
      Catch::Message("[truncated_normal] mean 0 and stddev 1e-50 are not representable in f32"));
}
