// The deterministic mode (DTENSOR_DETERMINISTIC=1, ops/expand.h), under mpirun with 2 and 4
// processes: batch sums over a mesh that spans the processes (a reduction over the batch, small
// and large, and matmul's weight gradient xᵀ·dy) give the bits of one process holding the whole
// batch on one device, and a split whose processes do not hold whole chunks is rejected, naming
// the op, the chunk, the process and the tensor.
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
      "[reduce_sum] the deterministic mode (DTENSOR_DETERMINISTIC=1) sums chunks of 3 rows across "
      "processes, but process 1's rows of " +
          x.short_string() + " start at row " + std::to_string(start) +
          " of the group (devices 0,1,2,3): split the batch so that every process holds whole "
          "chunks");
}
