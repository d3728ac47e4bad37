// The deterministic mode (DTENSOR_DETERMINISTIC=1, ops/expand.h), under mpirun with 2 and 4
// processes: batch sums over a mesh that spans the processes (a reduction over the batch, small
// and large, and matmul's weight gradient xᵀ·dy) give the bits of one process holding the whole
// batch on one device, as do contractions split over the processes (matmul's K, a sum over the
// last dim), and a split whose processes do not hold whole chunks is rejected, naming the op, the
// chunk, the dim, the process and the tensor.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/expand.h"
#include "ops/ops.h"
#include "runtime/process.h"

using namespace dtensor;

namespace {

Mesh spanning_mesh(int64_t devices) {
  const ProcessInfo p = this_process();
  return Mesh::create({{"batch", devices}}, DeviceType::kCPU, p.index, p.count);
}

// The value of `op(x, dy)` on `mesh` (x and dy batch-sharded, from fixed seeds), replicated and
// read back whole.
template <typename Op>
Tensor batch_sum_on(const Mesh& mesh, const Shape& x_shape, const Shape& dy_shape, const Op& op) {
  DTensor x = random_uniform(x_shape, Layout::batch_sharded(mesh, "batch", 2), 5, -1, 1);
  DTensor dy = random_uniform(dy_shape, Layout::batch_sharded(mesh, "batch", 2), 6, -1, 1);
  DTensor y = op(x, dy);
  return to_global(relayout(y, Layout::replicated(mesh, y.rank())));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("deterministic batch sums across processes have one device's bits") {
  REQUIRE(deterministic_sums());
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  const Mesh spanning = spanning_mesh(8);
  auto weight_gradient = [](const DTensor& x, const DTensor& dy) {
    return matmul(x, dy, /*transpose_a=*/true, /*transpose_b=*/false);
  };
  auto batch_sum = [](const DTensor& x, const DTensor&) { return reduce_sum(x, {0}); };
  auto batch_mean = [](const DTensor& x, const DTensor&) { return reduce_mean(x, {0}); };
  // 64 x 784: eight chunks of 8 rows; 64 x 30: a small sum, also in eight chunks; 40 rows:
  // chunks of 5 rows, one a device.
  for (const Shape& x_shape : {Shape{64, 784}, Shape{64, 30}, Shape{40, 50}}) {
    const Shape dy_shape{x_shape[0], 20};
    INFO("x " << shape_to_string(x_shape));
    CHECK(same_bits(batch_sum_on(spanning, x_shape, dy_shape, weight_gradient),
                    batch_sum_on(one, x_shape, dy_shape, weight_gradient)));
    CHECK(same_bits(batch_sum_on(spanning, x_shape, dy_shape, batch_sum),
                    batch_sum_on(one, x_shape, dy_shape, batch_sum)));
    CHECK(same_bits(batch_sum_on(spanning, x_shape, dy_shape, batch_mean),
                    batch_sum_on(one, x_shape, dy_shape, batch_mean)));
  }
}

TEST_CASE("a deterministic batch sum over processes that split a chunk is rejected") {
  // 20 rows on 4 devices: 5 rows each, chunks of 3 rows; process 1 starts inside a chunk.
  const ProcessInfo p = this_process();
  const Mesh mesh = spanning_mesh(4);
  DTensor x = random_uniform({20, 7}, Layout::batch_sharded(mesh, "batch", 2), 5, -1, 1);
  const int64_t start = 20 / p.count;
  CHECK_THROWS_WITH(
      reduce_sum(x, {0}),
      "[reduce_sum] the deterministic mode (DTENSOR_DETERMINISTIC=1) sums chunks of 3 along dim 0 "
      "across processes, but process 1's part of " +
          x.short_string() + " starts at " + std::to_string(start) +
          " of the group (devices 0,1,2,3): split that dim so that every process holds whole "
          "chunks");
  // K = 20 of a product on 4 devices: 5 each, chunks of 3.
  DTensor a = random_uniform({6, 20}, Layout({"unsharded", "batch"}, mesh), 5, -1, 1);
  DTensor b = random_uniform({20, 3}, Layout({"batch", "unsharded"}, mesh), 6, -1, 1);
  CHECK_THROWS_WITH(
      matmul(a, b),
      "[matmul] the deterministic mode (DTENSOR_DETERMINISTIC=1) sums chunks of 3 along dim 1 "
      "across processes, but process 1's part of " +
          a.short_string() + " starts at " + std::to_string(start) +
          " of the group (devices 0,1,2,3): split that dim so that every process holds whole "
          "chunks");
}

// A contraction split over a mesh dim that spans the processes: matmul's K (rank 2 and a batched
// rank 3) and a sum over the last dim give one device's bits, the processes' chunk values added
// in the one-process order.
TEST_CASE("deterministic contractions split across processes have one device's bits") {
  REQUIRE(deterministic_sums());
  const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
  const Mesh spanning = spanning_mesh(8);
  auto on = [](const Mesh& mesh, const Shape& shape, const std::vector<std::string>& specs,
               uint64_t seed) {
    std::vector<std::string> placed = specs;
    if (mesh.num_devices() == 1) placed.assign(specs.size(), Layout::kUnsharded);
    return random_uniform(shape, Layout(placed, mesh), seed, -1, 1);
  };
  auto whole = [](const DTensor& y) {
    return to_global(relayout(y, Layout::replicated(y.mesh(), y.rank())));
  };
  auto products = [&](const Mesh& mesh) {
    DTensor a = on(mesh, {24, 64}, {"unsharded", "batch"}, 5);
    DTensor b = on(mesh, {64, 40}, {"batch", "unsharded"}, 6);
    DTensor c = on(mesh, {3, 16, 48}, {"unsharded", "unsharded", "batch"}, 7);
    DTensor d = on(mesh, {48, 10}, {"batch", "unsharded"}, 8);
    return std::vector<Tensor>{whole(matmul(a, b)), whole(matmul(c, d)), whole(reduce_sum(c, {2}))};
  };
  const std::vector<Tensor> got = products(spanning), want = products(one);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("result " << i);
    CHECK(same_bits(got[i], want[i]));
  }
}
