// Replayed steps with row-stacked products, whose devices' rows are views of one result buffer
// (ops/expand.cc): eager's bits, one device's bits, and no replay writes into a buffer that an
// earlier result still views (segments never take over a view; the buffer outlives its views).
#include <catch2/catch.hpp>

#include <vector>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/test_tensors.h"
#include "train/capture/function.h"

using namespace dtensor;
using dtensor::testing::adjacent_views;
using dtensor::testing::deep_copy;
using dtensor::testing::same_bits;

namespace {

// Two products with a relu between them, and the weights' gradients of sum(y^2): products whose
// shards are views (h, y, the dx of layer 2), joined again by later products, read by segments.
std::vector<DTensor> two_layers(const DVariable& w1, const DVariable& w2, const DTensor& x) {
  GradientTape tape;
  tape.watch(w1);
  tape.watch(w2);
  const DTensor h = matmul(x, w1.value());
  const DTensor y = matmul(relu(h), w2.value());
  std::vector<DTensor> grads = tape.gradient(reduce_sum(square(y)), {w1, w2});
  return {h, y, add(y, y), grads[0], grads[1]};
}

}  // namespace

TEST_CASE("replays over view shards give eager's and one device's bits, earlier results intact") {
  const Mesh m8 = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  const Mesh m1 = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  auto weight = [](const Mesh& m, const Shape& shape, uint64_t seed) {
    return DVariable(random_uniform(shape, Layout::replicated(m, 2), seed, -0.3, 0.3));
  };
  const DVariable w1 = weight(m8, {64, 48}, 1), w2 = weight(m8, {48, 32}, 2);
  const DVariable v1 = weight(m1, {64, 48}, 1), v2 = weight(m1, {48, 32}, 2);
  Function step = function([&](const std::vector<DTensor>& a) { return two_layers(w1, w2, a[0]); });
  std::vector<DTensor> held, held_copies;
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    const uint64_t seed = 100 + static_cast<uint64_t>(i);
    const DTensor x = random_uniform({128, 64}, Layout::batch_sharded(m8, "batch", 2), seed, -1, 1);
    const std::vector<DTensor> eager = two_layers(w1, w2, x);
    const std::vector<DTensor> replayed = step({x});
    const std::vector<DTensor> one = two_layers(
        v1, v2, random_uniform({128, 64}, Layout::batch_sharded(m1, "batch", 2), seed, -1, 1));
    CHECK(adjacent_views(replayed[0]));  // the products' shards are views of one buffer
    CHECK(adjacent_views(replayed[1]));
    for (size_t k = 0; k < replayed.size(); ++k) {
      CAPTURE(k);
      CHECK(same_bits(eager[k], replayed[k]));
      CHECK(bitwise_equal(to_global(replayed[k]), to_global(one[k])));
    }
    // What the previous replay returned is still what it was.
    for (size_t k = 0; k < held.size(); ++k) CHECK(same_bits(held[k], held_copies[k]));
    held = replayed;
    held_copies.clear();
    for (const DTensor& r : replayed) held_copies.push_back(deep_copy(r));
  }
  CHECK(step.trace_count() == 1);
}
