#include "layout/layout.h"

#include <catch2/catch.hpp>

#include <vector>

#include "runtime/error.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using testing::all_layouts;
using testing::standard_meshes;

namespace {

// Global shapes of rank `rank` with even and uneven dims (sizes 1, 5, 8, 11 and an empty dim).
std::vector<Shape> shapes_of_rank(int64_t rank) {
  const std::vector<std::vector<int64_t>> options = {{8, 5, 1}, {11, 0, 8}, {3, 16, 7}};
  std::vector<Shape> shapes;
  for (const auto& sizes : options) {
    shapes.emplace_back(sizes.begin(), sizes.begin() + rank);
  }
  return shapes;
}

}  // namespace

TEST_CASE("chunk semantics for uneven dims") {
  CHECK(chunk_range(5, 4, 0).offset == 0);
  CHECK(chunk_range(5, 4, 0).size == 2);
  CHECK(chunk_range(5, 4, 2).offset == 4);
  CHECK(chunk_range(5, 4, 2).size == 1);
  CHECK(chunk_range(5, 4, 3).offset == 5);
  CHECK(chunk_range(5, 4, 3).size == 0);
  CHECK(chunk_range(8, 8, 7).size == 1);
  CHECK(chunk_range(0, 3, 1).size == 0);
}

TEST_CASE("shards of every layout tile the global tensor exactly once") {
  int64_t checked = 0;
  for (const Mesh& mesh : standard_meshes()) {
    for (int64_t rank = 1; rank <= 3; ++rank) {
      for (const Layout& layout : all_layouts(mesh, rank, /*with_partial=*/true)) {
        for (const Shape& shape : shapes_of_rank(rank)) {
          std::vector<int> covered(static_cast<size_t>(num_elements(shape)), 0);
          auto strides = row_major_strides(shape);
          MeshDimMask not_sharded = ~layout.sharded_mask();
          for (int64_t id = 0; id < mesh.num_devices(); ++id) {
            Shape local = layout.shard_shape(shape, id);
            auto offset = layout.shard_offset(shape, id);
            // Devices that differ only in non-sharding mesh dims hold the same shard.
            int64_t rep = mesh.group(id, not_sharded & ((1u << mesh.rank()) - 1))[0];
            REQUIRE(layout.shard_shape(shape, rep) == local);
            REQUIRE(layout.shard_offset(shape, rep) == offset);
            if (rep != id) continue;
            // Count the elements this device's shard covers.
            for (int64_t i = 0; i < num_elements(local); ++i) {
              int64_t rem = i, flat = 0;
              auto local_strides = row_major_strides(local);
              for (size_t d = 0; d < local.size(); ++d) {
                int64_t idx = rem / local_strides[d];
                rem %= local_strides[d];
                flat += (offset[d] + idx) * strides[d];
              }
              covered[flat]++;
            }
          }
          for (int c : covered) REQUIRE(c == 1);
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 300);
}

TEST_CASE("parse of print is the identity for every layout") {
  for (const Mesh& mesh : standard_meshes()) {
    for (int64_t rank = 0; rank <= 3; ++rank) {
      for (const Layout& layout : all_layouts(mesh, rank, /*with_partial=*/true)) {
        Layout back = Layout::from_string(layout.to_string());
        REQUIRE(back == layout);
        REQUIRE(back.to_string() == layout.to_string());
      }
    }
  }
  Layout max_partial({"x", "unsharded"},
                     Mesh::create({{"x", 2}, {"y", 2}, {"z", 2}}, DeviceType::kCPU),
                     {{"z", ReduceOp::kMax}, {"y", ReduceOp::kMax}});
  CHECK(Layout::from_string(max_partial.to_string()) == max_partial);
  CHECK(max_partial.short_string() == "[x,unsharded] partial:max(y),max(z)");
}

TEST_CASE("reads TF DTensor layout strings") {
  std::string mesh =
      "|batch=2|0,1|0,1|/job:localhost/replica:0/task:0/device:CPU:0,"
      "/job:localhost/replica:0/task:0/device:CPU:1";
  Layout l = Layout::from_string("sharding_specs:batch,unsharded, mesh:" + mesh);
  CHECK(l == Layout::batch_sharded(Mesh::from_string(mesh), "batch", 2));
  CHECK(l.to_string() == "sharding_specs:batch,unsharded, mesh:" + mesh);
  Layout scalar = Layout::from_string("sharding_specs:, mesh:" + mesh);
  CHECK(scalar.rank() == 0);
}

TEST_CASE("helpers build the expected layouts") {
  Mesh mesh = Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU);
  CHECK(Layout::replicated(mesh, 2).sharding_specs() ==
        std::vector<std::string>{"unsharded", "unsharded"});
  CHECK(Layout::replicated(mesh, 2).is_fully_replicated());
  CHECK(Layout::batch_sharded(mesh, "batch", 3, 1).sharding_specs() ==
        std::vector<std::string>{"unsharded", "batch", "unsharded"});
  Layout w = Layout::inner_sharded(mesh, "model", 2);
  CHECK(w.sharding_specs() == std::vector<std::string>{"unsharded", "model"});
  // The seed's bias layout: weight_layout.delete([0]).
  CHECK(w.delete_dims({0}).sharding_specs() == std::vector<std::string>{"model"});
  CHECK(w.num_shards_per_dim() == std::vector<int64_t>{1, 4});
  CHECK(w.tensor_dim_of(1) == 1);
  CHECK(w.tensor_dim_of(0) == -1);
  Layout p = Layout::replicated(mesh, 1).with_partial({{"batch", ReduceOp::kSum}});
  CHECK(p.is_partial());
  CHECK(p.partial_mask() == 1u);
  CHECK(p.replicated_mask() == 2u);
  CHECK(p.without_partial() == Layout::replicated(mesh, 1));
  CHECK(p != Layout::replicated(mesh, 1));
  CHECK(w.shard_shape({10, 10}, 3) ==
        Shape{10, 1});  // chunks of ceil(10/4) = 3: the last holds one column
  CHECK(w.shard_offset({10, 10}, 3) == std::vector<int64_t>{0, 9});
}

TEST_CASE("layout validation: every rule has its error") {
  using Catch::Message;
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  CHECK_THROWS_MATCHES(
      Layout({"z"}, mesh), LayoutError,
      Message("[Layout] sharding spec 'z' of tensor dim 0 is not a dim of mesh x=2,y=4"));
  CHECK_THROWS_MATCHES(Layout({"x", "x"}, mesh), LayoutError,
                       Message("[Layout] mesh dim 'x' shards more than one tensor dim in [x,x]"));
  CHECK_THROWS_MATCHES(Layout({"x"}, mesh, {{"x", ReduceOp::kSum}}), LayoutError,
                       Message("[Layout] mesh dim 'x' is both sharded and partial in [x]"));
  CHECK_THROWS_MATCHES(Layout({"x"}, mesh, {{"q", ReduceOp::kSum}}), LayoutError,
                       Message("[Layout] partial dim 'q' is not a dim of mesh x=2,y=4"));
  CHECK_THROWS_MATCHES(Layout({"x"}, mesh, {{"y", ReduceOp::kSum}, {"y", ReduceOp::kSum}}),
                       LayoutError, Message("[Layout] partial dim 'y' is listed twice"));
  CHECK_THROWS_MATCHES(
      Layout({"unsharded"}, mesh, {{"y", ReduceOp::kSum}, {"x", ReduceOp::kMax}}), LayoutError,
      Message("[Layout] partial dims mix sum(y) and max(x); all must share one op"));
  CHECK_THROWS_MATCHES(Layout::batch_sharded(mesh, "x", 2, 2), LayoutError,
                       Message("[Layout::batch_sharded] axis 2 out of range for rank 2"));
  CHECK_THROWS_MATCHES(Layout::inner_sharded(mesh, "x", 0), LayoutError,
                       Message("[Layout::inner_sharded] rank 0 has no inner dim"));
  CHECK_THROWS_MATCHES(Layout::replicated(mesh, -1), LayoutError,
                       Message("[Layout::replicated] negative rank -1"));
  CHECK_THROWS_MATCHES(
      Layout({"x", "y"}, mesh).delete_dims({2}), LayoutError,
      Message("[Layout::delete_dims] tensor dim 2 is out of range for layout [x,y] "
              "(rank 2)"));
  CHECK_THROWS_MATCHES(
      Layout({"x", "y"}, mesh).shard_shape({4}, 0), LayoutError,
      Message("[Layout::shard_shape] shape [4] has rank 1 but layout [x,y] has rank 2"));
}

TEST_CASE("layout string validation") {
  using Catch::Message;
  std::string mesh = Mesh::create({{"x", 2}}, DeviceType::kCPU).to_string();
  CHECK_THROWS_MATCHES(Layout::from_string("specs:x, mesh:" + mesh), LayoutError,
                       Message("[Layout::from_string] layout string 'specs:x, mesh:" + mesh +
                               "' does not start with 'sharding_specs:'"));
  CHECK_THROWS_MATCHES(Layout::from_string("sharding_specs:x"), LayoutError,
                       Message("[Layout::from_string] layout string 'sharding_specs:x' has no "
                               "'mesh:' part"));
  CHECK_THROWS_MATCHES(
      Layout::from_string("sharding_specs:unsharded, partial:avg(x), mesh:" + mesh), LayoutError,
      Message("[Layout::from_string] unknown reduce op 'avg' in 'sharding_specs:unsharded, "
              "partial:avg(x), mesh:" +
              mesh + "'"));
  CHECK_THROWS_MATCHES(
      Layout::from_string("sharding_specs:unsharded, partial:x, mesh:" + mesh), LayoutError,
      Message("[Layout::from_string] bad partial entry 'x' in 'sharding_specs:unsharded, "
              "partial:x, mesh:" +
              mesh + "' (expected op(mesh_dim))"));
}

TEST_CASE("regression: layout queries check their arguments") {
  using Catch::Message;
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  Layout layout({"x", "unsharded"}, mesh);
  // with_spec used to throw std::out_of_range; spec/mesh_dim_of/shard_range read out of bounds.
  CHECK_THROWS_MATCHES(layout.with_spec(2, "y"), LayoutError,
                       Message("[Layout::with_spec] tensor dim 2 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.with_spec(-1, "y"), LayoutError,
                       Message("[Layout::with_spec] tensor dim -1 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.spec(2), LayoutError,
                       Message("[Layout::spec] tensor dim 2 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.mesh_dim_of(5), LayoutError,
                       Message("[Layout::mesh_dim_of] tensor dim 5 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.is_sharded(-3), LayoutError,
                       Message("[Layout::is_sharded] tensor dim -3 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.num_shards(2), LayoutError,
                       Message("[Layout::num_shards] tensor dim 2 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.shard_range({4, 4}, 2, 0), LayoutError,
                       Message("[Layout::shard_range] tensor dim 2 is out of range for layout "
                               "[x,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.shard_range({4}, 0, 0), LayoutError,
                       Message("[Layout::shard_range] shape [4] has rank 1 but layout "
                               "[x,unsharded] has rank 2"));
  CHECK_THROWS_MATCHES(layout.shard_shape({4, 4}, 8), LayoutError,
                       Message("[Layout::shard_shape] device id 8 is out of range for mesh "
                               "x=2,y=4 (8 devices)"));
  CHECK_THROWS_MATCHES(layout.shard_offset({4, 4}, -1), LayoutError,
                       Message("[Layout::shard_offset] device id -1 is out of range for mesh "
                               "x=2,y=4 (8 devices)"));
  CHECK_THROWS_MATCHES(layout.shard_shape({-4, 4}, 0), ShapeError,
                       Message("[Layout::shard_shape] negative dim in shape [-4,4]"));
  CHECK(layout.shard_shape({5, 3}, 4) == Shape{2, 3});
  CHECK(layout.shard_range({5, 3}, 0, 7).offset == 3);
}

TEST_CASE("regression: tensor_dim_of and delete_dims reject out-of-range dims (issue 25)") {
  using Catch::Message;
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 4}}, DeviceType::kCPU);
  Layout layout({"unsharded", "y"}, mesh);
  // tensor_dim_of used to return -1 for any index, as if the mesh dim existed and were unused.
  CHECK_THROWS_MATCHES(layout.tensor_dim_of(2), LayoutError,
                       Message("[Layout::tensor_dim_of] mesh dim index 2 is out of range for "
                               "layout [unsharded,y] on mesh x=2,y=4 (rank 2)"));
  CHECK_THROWS_MATCHES(layout.tensor_dim_of(-1), LayoutError,
                       Message("[Layout::tensor_dim_of] mesh dim index -1 is out of range for "
                               "layout [unsharded,y] on mesh x=2,y=4 (rank 2)"));
  CHECK(layout.tensor_dim_of(0) == -1);
  CHECK(layout.tensor_dim_of(1) == 1);
  // delete_dims named the dim after adding the rank (-5 was reported as -3).
  CHECK_THROWS_MATCHES(layout.delete_dims({-5}), LayoutError,
                       Message("[Layout::delete_dims] tensor dim -5 is out of range for layout "
                               "[unsharded,y] (rank 2)"));
  CHECK_THROWS_MATCHES(layout.delete_dims({2}), LayoutError,
                       Message("[Layout::delete_dims] tensor dim 2 is out of range for layout "
                               "[unsharded,y] (rank 2)"));
  CHECK(layout.delete_dims({-1}) == Layout({"unsharded"}, mesh));
  CHECK_THROWS_MATCHES(layout.num_shards(-1), LayoutError,
                       Message("[Layout::num_shards] tensor dim -1 is out of range for layout "
                               "[unsharded,y] (rank 2)"));
  CHECK(layout.num_shards_per_dim() == std::vector<int64_t>{1, 4});
}

TEST_CASE("regression: malformed layout strings are a LayoutError or MeshError") {
  using Catch::Message;
  std::string mesh = Mesh::create({{"x", 2}}, DeviceType::kCPU).to_string();
  for (const char* head :
       {"sharding_specs:x, partial:sum(x),, mesh:", "sharding_specs:, partial:(), mesh:",
        "sharding_specs:x, partial:sum(, mesh:", "sharding_specs:x, partial:), mesh:",
        "sharding_specs:x,,x, mesh:", "sharding_specs:x, partial:sum(y)), mesh:"}) {
    CHECK_THROWS_AS(Layout::from_string(std::string(head) + mesh), LayoutError);
  }
  CHECK_THROWS_MATCHES(Layout::from_string("sharding_specs:x, mesh:|=333,=33333333333333333|||"),
                       MeshError, Message("[Mesh::from_string] mesh dim name is empty"));
  CHECK_THROWS_AS(Layout::from_string("sharding_specs:x, mesh:"), MeshError);
  CHECK_THROWS_AS(Layout::from_string("sharding_specs:"), LayoutError);
  CHECK_THROWS_AS(Layout::from_string(""), LayoutError);
}
