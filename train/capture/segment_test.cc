// Fused elementwise segments of captured steps (segment.h) against eager ops: long mixed chains
// with broadcast operands on sharded, replicated and unevenly sharded layouts replay eager's bits;
// results handed out by one replay are not touched by the next; a step may return a segment's
// input next to the segment's results.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "dtensor/creation.h"
#include "ops/ops.h"
#include "tests/test_tensors.h"
#include "train/capture/function.h"

using namespace dtensor;
using dtensor::testing::deep_copy;
using dtensor::testing::same_bits;

namespace {

// A long chain of unary and binary ops with row, scalar and column broadcasts, comparisons and
// scales between them (which end segments), returning several intermediate values.
std::vector<DTensor> mixed_chain(const std::vector<DTensor>& a) {
  const DTensor& x = a[0];    // [n, m]
  const DTensor& row = a[1];  // [m]
  const DTensor& one = a[2];  // [1, 1]
  const DTensor& col = a[3];  // [n, 1]
  DTensor y = x;
  std::vector<DTensor> kept;
  for (int i = 0; i < 6; ++i) {
    y = add(y, row);
    y = mul(y, one);
    y = tanh(y);
    y = sub(row, y);
    y = maximum(y, x);
    y = exp(neg(y));
    y = div(y, add(abs(row), one));
    y = sqrt(add(square(y), one));
    y = log(y);
    y = gelu(minimum(y, sigmoid(x)));
    y = pow(add(abs(y), one), one);
    y = relu(sub(y, mul(x, x)));
    if (i == 2) kept.push_back(y);
    if (i == 3) y = add(y, col);  // a column broadcast: not fused
    if (i == 4) y = scale(y, 0.5);
  }
  kept.push_back(y);
  kept.push_back(cast(greater(y, x), DType::kF32));
  return kept;
}

std::vector<DTensor> chain_arguments(const Mesh& mesh, bool sharded, int64_t n, int64_t m,
                                     uint64_t seed) {
  Layout l2 = sharded ? Layout::batch_sharded(mesh, "batch", 2) : Layout::replicated(mesh, 2);
  Layout l1 = Layout::replicated(mesh, 1);
  return {random_uniform({n, m}, l2, seed, -2.0, 2.0), random_uniform({m}, l1, seed + 1, -1.0, 1.0),
          random_uniform({1, 1}, Layout::replicated(mesh, 2), seed + 2, 0.5, 1.5),
          random_uniform({n, 1}, l2, seed + 3, -1.0, 1.0)};
}

}  // namespace

TEST_CASE("a long mixed elementwise chain replays eager's bits on every layout") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  // Even shards, uneven ones (7 rows on 8 devices: one empty shard) and blocks of several
  // cache blocks per device (rows of 300 elements).
  struct Case {
    bool sharded;
    int64_t n, m;
  };
  for (Case c : {Case{true, 16, 5}, Case{false, 16, 5}, Case{true, 7, 3}, Case{false, 7, 3},
                 Case{true, 64, 300}, Case{false, 24, 300}}) {
    CAPTURE(c.sharded, c.n, c.m);
    Function f = function(mixed_chain);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      std::vector<DTensor> args = chain_arguments(mesh, c.sharded, c.n, c.m, seed * 10);
      std::vector<DTensor> eager = mixed_chain(args);
      std::vector<DTensor> replayed = f(args);
      REQUIRE(replayed.size() == eager.size());
      for (size_t i = 0; i < eager.size(); ++i) {
        CAPTURE(i);
        CHECK(same_bits(eager[i], replayed[i]));
      }
    }
    CHECK(f.trace_count() == 1);
    CHECK(f.fused_calls(chain_arguments(mesh, c.sharded, c.n, c.m, 1)) > 100);
  }
}

TEST_CASE("f64 and integer chains replay eager's bits fused") {
  Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  auto step = [](const std::vector<DTensor>& a) {
    DTensor y = a[0];
    for (int i = 0; i < 20; ++i) y = i % 3 == 0 ? relu(sub(y, a[1])) : add(mul(y, a[1]), a[0]);
    return std::vector<DTensor>{y};
  };
  for (DType dtype : {DType::kF64, DType::kI32, DType::kI64}) {
    CAPTURE(dtype_name(dtype));
    Function f = function(step);
    Layout l = Layout::batch_sharded(mesh, "batch", 2);
    std::vector<DTensor> args = {
        cast(random_uniform({8, 6}, l, 3, -3.0, 3.0), dtype),
        cast(random_uniform({6}, Layout::replicated(mesh, 1), 4, -2.0, 2.0), dtype)};
    for (int r = 0; r < 2; ++r) CHECK(same_bits(step(args)[0], f(args)[0]));
    CHECK(f.fused_calls(args) == 40);
  }
}

TEST_CASE("a value returned by one replay stays intact after the next replay") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  for (bool sharded : {true, false}) {
    Function f = function(mixed_chain);
    std::vector<DTensor> first = f(chain_arguments(mesh, sharded, 16, 5, 1));
    std::vector<DTensor> kept;
    for (const DTensor& y : first) kept.push_back(deep_copy(y));
    std::vector<DTensor> second = f(chain_arguments(mesh, sharded, 16, 5, 2));
    for (size_t i = 0; i < first.size(); ++i) {
      CHECK(same_bits(first[i], kept[i]));
      CHECK_FALSE(same_bits(first[i], second[i]));
    }
  }
}

TEST_CASE("a step may return a fused segment's input next to its results") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  auto step = [](const std::vector<DTensor>& a) {
    DTensor y = relu(add(a[0], a[1]));
    DTensor z = mul(y, a[0]);
    return std::vector<DTensor>{a[0], z, a[1], y};
  };
  auto arguments = [&](bool sharded, uint64_t seed) {
    std::vector<DTensor> args = chain_arguments(mesh, sharded, 16, 5, seed);
    return std::vector<DTensor>{args[0],
                                random_uniform({16, 5}, args[0].layout(), seed + 7, -1.0, 1.0)};
  };
  for (bool sharded : {true, false}) {
    Function f = function(step);
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      std::vector<DTensor> args = arguments(sharded, seed);
      const DTensor x = deep_copy(args[0]);
      std::vector<DTensor> eager = step(args);
      std::vector<DTensor> replayed = f(args);
      for (size_t i = 0; i < eager.size(); ++i) CHECK(same_bits(eager[i], replayed[i]));
      CHECK(same_bits(replayed[0], x));
      // The returned input is the argument itself, untouched by the fused pass.
      CHECK(replayed[0].shards()[0].shares_storage_with(args[0].shards()[0]));
    }
    CHECK(f.fused_calls(arguments(sharded, 1)) == 3);
  }
}

TEST_CASE("a segment writes into an input that dies in it, unless the step returns that input") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  // t is made by a call outside the segment (scale is not fused) and read last by its first call.
  auto dies = [](const std::vector<DTensor>& a) {
    DTensor t = scale(a[0], 2.0);
    DTensor y = relu(add(t, a[1]));
    return std::vector<DTensor>{mul(y, y)};
  };
  auto returned = [](const std::vector<DTensor>& a) {
    DTensor t = scale(a[0], 2.0);
    DTensor y = relu(add(t, a[1]));
    return std::vector<DTensor>{mul(y, y), t};
  };
  for (bool sharded : {true, false}) {
    auto two = [&](uint64_t seed) {
      std::vector<DTensor> args = chain_arguments(mesh, sharded, 16, 5, seed);
      return std::vector<DTensor>{args[0], args[1]};
    };
    for (const Step& step : {Step(dies), Step(returned)}) {
      Function f = function(step);
      std::vector<DTensor> held;
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        std::vector<DTensor> args = two(seed);
        std::vector<DTensor> eager = step(args);
        std::vector<DTensor> replayed = f(args);
        REQUIRE(eager.size() == replayed.size());
        for (size_t i = 0; i < eager.size(); ++i) CHECK(same_bits(eager[i], replayed[i]));
        // A result held across the next replay keeps its contents.
        held = replayed;
        const std::vector<DTensor> copies = {deep_copy(held[0])};
        std::vector<DTensor> next = f(two(seed + 100));
        CHECK(same_bits(held[0], copies[0]));
      }
      CHECK(f.trace_count() == 1);
    }
  }
}

namespace {

// f32 values that exercise bf16 rounding: ties to even (both parities) and their neighbours,
// f32 denormals, the largest floats (rounding to inf), ±inf, quiet and signalling NaNs of both
// signs, ±0, then random values.
Tensor rounding_values(const Shape& shape) {
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u,
                              0xbf818000u, 0x00000001u, 0x00008000u, 0x00018000u, 0x007fffffu,
                              0x80008000u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                              0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                              0xff800001u, 0x00000000u, 0x80000000u, 0x3f800000u};
  Tensor t = Tensor::empty(shape, DType::kF32);
  uint32_t* bits = static_cast<uint32_t*>(t.raw_data());
  uint32_t state = 12345u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    state = state * 1664525u + 1013904223u;
    const size_t n = sizeof(special) / sizeof(special[0]);
    bits[i] = static_cast<size_t>(i) < n ? special[i] : state;
  }
  return t;
}

// x cast to bf16 straight from the argument; x * s cast to bf16 (the f32 product in registers
// only); that bf16 value widened and squared. Optionally returns the f32 product too.
std::vector<DTensor> cast_chain(const std::vector<DTensor>& a, bool return_product) {
  DTensor direct = cast(a[0], DType::kBF16);
  DTensor product = mul(a[0], a[1]);
  DTensor narrow = cast(product, DType::kBF16);
  DTensor wide = cast(narrow, DType::kF32);
  std::vector<DTensor> out = {direct, narrow, mul(wide, wide)};
  if (return_product) out.push_back(product);
  return out;
}

}  // namespace

TEST_CASE("f32 <-> bf16 casts fused into segments round as the eager cast does") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  struct Case {
    bool sharded;
    int64_t n, m;
  };
  for (Case c : {Case{true, 16, 300}, Case{false, 16, 300}, Case{true, 7, 5}}) {
    for (bool return_product : {false, true}) {
      CAPTURE(c.sharded, c.n, c.m, return_product);
      Layout l2 = c.sharded ? Layout::batch_sharded(mesh, "batch", 2) : Layout::replicated(mesh, 2);
      const Tensor x = rounding_values({c.n, c.m});
      auto arguments = [&](uint64_t seed) {
        return std::vector<DTensor>{
            distribute(x, l2), random_uniform({c.m}, Layout::replicated(mesh, 1), seed, 0.5, 2.0)};
      };
      auto step = [return_product](const std::vector<DTensor>& a) {
        return cast_chain(a, return_product);
      };
      Function f = function(step);
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        std::vector<DTensor> args = arguments(seed);
        std::vector<DTensor> eager = step(args);
        std::vector<DTensor> replayed = f(args);
        REQUIRE(replayed.size() == eager.size());
        for (size_t i = 0; i < eager.size(); ++i) {
          CAPTURE(i);
          CHECK(replayed[i].dtype() == eager[i].dtype());
          CHECK(same_bits(eager[i], replayed[i]));
        }
        // The direct cast against the scalar rounding of BFloat16(float), element by element.
        const Tensor direct = to_global(replayed[0]);
        const BFloat16* got = direct.data<BFloat16>();
        const float* in = x.data<float>();
        int64_t wrong = 0;
        for (int64_t i = 0; i < x.num_elements(); ++i) wrong += got[i].bits != BFloat16(in[i]).bits;
        CHECK(wrong == 0);
      }
      // One segment of all five calls; it writes the three (or four) values the step returns,
      // and the f32 product and its widened copy only live in blocks when nothing else reads them.
      CHECK(f.trace_count() == 1);
      CHECK(f.fused_calls(arguments(1)) == 5);
      CHECK(f.fused_results(arguments(1)) == (return_product ? 4 : 3));
    }
  }
}

TEST_CASE("a fused cast's source read after the segment is still written") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  // relu_grad-like chain as the mixed dense VJP makes it: g * mask, cast to bf16, then the f32
  // value read again by a reduction (the bias gradient) after the segment.
  auto step = [](const std::vector<DTensor>& a) {
    DTensor gz = mul(a[0], relu(a[1]));
    DTensor g16 = cast(gz, DType::kBF16);
    DTensor bias = reduce_sum(gz, {0});
    return std::vector<DTensor>{g16, bias};
  };
  Layout l2 = Layout::batch_sharded(mesh, "batch", 2);
  auto arguments = [&](uint64_t seed) {
    return std::vector<DTensor>{random_uniform({16, 300}, l2, seed, -2.0, 2.0),
                                random_uniform({16, 300}, l2, seed + 1, -1.0, 1.0)};
  };
  Function f = function(step);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    std::vector<DTensor> args = arguments(seed * 10);
    std::vector<DTensor> eager = step(args);
    std::vector<DTensor> replayed = f(args);
    for (size_t i = 0; i < eager.size(); ++i) CHECK(same_bits(eager[i], replayed[i]));
  }
  // relu, mul and cast in one segment, writing gz (read by the reduction) and the bf16 value.
  CHECK(f.fused_calls(arguments(1)) == 3);
  CHECK(f.fused_results(arguments(1)) == 2);
}
