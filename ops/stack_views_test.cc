// Row-stacked results as views (ops/expand.cc): on a CPU mesh, the devices' rows of one stacked
// kernel call are views of its result buffer, and shards that are adjacent views, in order, of one
// buffer are read by the next stacked call without a copy. Views must never alias wrongly: each
// device reads its own rows, out-of-order or misaligned shards are put together by copying, and
// nothing writes in place through a view that other devices or values still read.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "dtensor/variable.h"
#include "ops/ops.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::adjacent_views;
using dtensor::testing::uniform_f32;

namespace {

Mesh batch_mesh(int64_t n) { return Mesh::create({{"batch", n}}, DeviceType::kCPU); }

// `global` on a mesh of `n` devices, rows split over them; w replicated.
DTensor rows_on(const Tensor& global, int64_t n) {
  return distribute(global, Layout::batch_sharded(batch_mesh(n), "batch", 2));
}
DTensor whole_on(const Tensor& global, int64_t n) {
  return distribute(global, Layout::replicated(batch_mesh(n), 2));
}

}  // namespace

TEST_CASE("row-stacked products hand out views of one buffer with one device's bits") {
  const Tensor x = uniform_f32({128, 96}, 1), w1 = uniform_f32({96, 80}, 2);
  const Tensor w2 = uniform_f32({80, 48}, 3);
  const DTensor h8 = matmul(rows_on(x, 8), whole_on(w1, 8));
  CHECK(adjacent_views(h8));
  for (const Tensor& t : h8.shards()) CHECK_FALSE(t.is_unique());
  // The second product reads h8's rows in place (joined) and its own result is views again.
  const DTensor y8 = matmul(h8, whole_on(w2, 8));
  CHECK(adjacent_views(y8));
  const DTensor y1 = matmul(matmul(rows_on(x, 1), whole_on(w1, 1)), whole_on(w2, 1));
  CHECK(bitwise_equal(to_global(y8), to_global(y1)));
  // Each device's shard holds its own rows.
  const Tensor y = to_global(y1);
  for (size_t d = 0; d < 8; ++d) {
    CHECK(std::memcmp(y8.shard(d).raw_data(), static_cast<const float*>(y.raw_data()) + d * 16 * 48,
                      y8.shard(d).nbytes()) == 0);
  }
}

TEST_CASE("shards that are views of one buffer in another order are copied, not joined") {
  // Device d's rows are block 7 - d of one buffer: adjacent in memory, but in reverse order.
  const Tensor backwards = uniform_f32({128, 64}, 4);
  const Mesh mesh = batch_mesh(8);
  std::vector<Tensor> shards;
  Tensor global = Tensor::empty({128, 64}, DType::kF32);
  for (int64_t d = 0; d < 8; ++d) {
    shards.push_back(*backwards.leading_view((7 - d) * 16, (8 - d) * 16));
    std::memcpy(static_cast<float*>(global.raw_data()) + d * 16 * 64, shards.back().raw_data(),
                shards.back().nbytes());
  }
  const DTensor x8(Shape{128, 64}, DType::kF32, Layout::batch_sharded(mesh, "batch", 2), shards);
  const Tensor w = uniform_f32({64, 32}, 5);
  const DTensor y8 = matmul(x8, whole_on(w, 8));
  const DTensor y1 = matmul(rows_on(global, 1), whole_on(w, 1));
  CHECK(bitwise_equal(to_global(y8), to_global(y1)));
  CHECK(bitwise_equal(to_global(x8), global));  // the input's views are untouched
}

TEST_CASE("rows that would start misaligned are copied; uneven and empty shards keep their rows") {
  // 3 columns of f32: 12-byte rows, so most devices' rows cannot be views (64-byte alignment).
  const Tensor x = uniform_f32({13, 5}, 6), w = uniform_f32({5, 3}, 7);
  const DTensor y8 = matmul(rows_on(x, 8), whole_on(w, 8));  // 2,2,2,2,2,2,1,0 rows
  const DTensor y1 = matmul(rows_on(x, 1), whole_on(w, 1));
  CHECK(bitwise_equal(to_global(y8), to_global(y1)));
  CHECK(y8.shard(7).dim(0) == 0);
}

TEST_CASE("an in-place update never writes through a view that another value still reads") {
  const Tensor x = uniform_f32({128, 32}, 8), w = uniform_f32({32, 16}, 9);
  std::optional<DVariable> v;
  Tensor rows_of_device_0;
  {
    const DTensor r = matmul(rows_on(x, 8), whole_on(w, 8));  // views of one buffer
    REQUIRE(adjacent_views(r));
    v.emplace(r);
    // Another reader of the buffer: half of device 0's rows, cut again (a view of its parent).
    rows_of_device_0 = *r.shard(0).leading_view(0, 8);
  }
  const Tensor before = rows_of_device_0.clone();
  // Only the variable holds the shards' handles, but they are views: no in-place write.
  const bool wrote = v->update_in_place([](const std::vector<Tensor>& shards) {
    for (const Tensor& t : shards) {
      Tensor target = t;
      for (int64_t i = 0; i < target.num_elements(); ++i) target.data<float>()[i] = 1.0f;
    }
    return true;
  });
  CHECK_FALSE(wrote);
  // Copy-on-write updates leave the other reader alone and change the variable.
  const Tensor delta = uniform_f32({128, 16}, 10);
  v->assign_add(rows_on(delta, 8));
  const Tensor updated = to_global(v->value());
  CHECK(updated.data<float>()[0] == before.data<float>()[0] + delta.data<float>()[0]);
  CHECK(bitwise_equal(rows_of_device_0, before));
}
