#include "dtensor/relayout.h"

#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "dtensor/collectives.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::distribute_with_terms;
using dtensor::testing::integer_tensor;
using dtensor::testing::standard_meshes;
using dtensor::testing::test_mesh;

namespace {

// Uneven shapes on purpose: dims of 1, 3, 5 and 13 split 2, 4 or 8 ways leave short and empty
// shards.
std::vector<Shape> shapes_of_rank(int64_t rank) {
  switch (rank) {
    case 1:
      return {{13}, {8}, {3}};
    case 2:
      return {{5, 7}, {8, 4}};
    default:
      return {{3, 5, 4}};
  }
}

void check_round_trip(const Tensor& x, const Layout& a, const Layout& b, uint64_t seed) {
  DTensor src = distribute_with_terms(x, a, seed);
  DTensor out = relayout(src, b);
  INFO("from " << a.short_string() << " to " << b.short_string() << " on " << a.mesh().dims_string()
               << " shape " << shape_to_string(x.shape()) << " plan "
               << plan_relayout(a, b, x.shape(), x.dtype())->to_string());
  REQUIRE(out.layout() == b);
  // The constructor re-validates every shard shape against the target layout.
  DTensor checked(out.shape(), out.dtype(), out.layout(), out.shards());
  REQUIRE(bitwise_equal(to_global(checked), x));
}

CollectiveStats count(const DTensor& x, const Layout& to) {
  reset_collective_stats();
  relayout(x, to);
  return collective_stats();
}

}  // namespace

TEST_CASE("every pair of layouts round-trips bit for bit (partial and uneven included)") {
  uint64_t seed = 1;
  int64_t pairs = 0;
  for (const Mesh& mesh : standard_meshes()) {
    for (int64_t rank = 1; rank <= 3; ++rank) {
      std::vector<Layout> layouts = all_layouts(mesh, rank, /*with_partial=*/true);
      for (const Shape& shape : shapes_of_rank(rank)) {
        Tensor x = integer_tensor(shape, DType::kF32, seed++);
        for (const Layout& a : layouts) {
          REQUIRE(bitwise_equal(to_global(distribute_with_terms(x, a, seed)), x));
          for (const Layout& b : layouts) {
            check_round_trip(x, a, b, seed++);
            ++pairs;
          }
        }
      }
    }
  }
  CHECK(pairs > 10000);
}

TEST_CASE("max and min partial layouts reduce exactly") {
  Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  Tensor x = integer_tensor({5, 7}, DType::kF32, 7);
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    std::vector<Layout> sources = {
        Layout({"unsharded", "unsharded"}, mesh, {{"x", op}}),
        Layout({"unsharded", "x"}, mesh, {{"y", op}}),
        Layout({"unsharded", "unsharded"}, mesh, {{"x", op}, {"y", op}}),
    };
    for (const Layout& a : sources) {
      for (const Layout& b : all_layouts(mesh, 2, /*with_partial=*/false))
        check_round_trip(x, a, b, 3);
      check_round_trip(x, Layout::replicated(mesh, 2), a, 4);
      check_round_trip(x, a, Layout({"y", "unsharded"}, mesh, {{"x", ReduceOp::kSum}}), 5);
    }
  }
}

TEST_CASE("every dtype relayouts exactly") {
  Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  for (DType dtype : {DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    Tensor x = integer_tensor({5, 9}, dtype, 11);
    auto layouts = all_layouts(mesh, 2, /*with_partial=*/dtype != DType::kBool);
    for (const Layout& a : layouts) {
      for (const Layout& b : layouts) check_round_trip(x, a, b, 12);
    }
  }
}

TEST_CASE("scalars relayout between replicated and partial") {
  Mesh mesh = test_mesh({{"batch", 8}});
  Tensor x = integer_tensor({}, DType::kF32, 3);
  Layout rep = Layout::replicated(mesh, 0);
  Layout partial = rep.with_partial({{"batch", ReduceOp::kSum}});
  check_round_trip(x, rep, partial, 1);
  check_round_trip(x, partial, rep, 2);
}

TEST_CASE("relayout emits only the collectives the layouts force") {
  Mesh line = test_mesh({{"batch", 8}});
  Mesh grid = test_mesh({{"x", 2}, {"y", 4}});
  Tensor x = integer_tensor({16, 24}, DType::kF32, 5);
  DTensor rep = distribute(x, Layout::replicated(line, 2));

  SECTION("replicated -> sharded moves no data") {
    CollectiveStats s = count(rep, Layout::batch_sharded(line, "batch", 2, 1));
    CHECK(s.total() == 0);
    CHECK(s.bytes == 0);
  }
  SECTION("sharded(a) -> sharded(b) on one mesh dim is one all-to-all") {
    DTensor rows = distribute(x, Layout::batch_sharded(line, "batch", 2, 0));
    CollectiveStats s = count(rows, Layout::batch_sharded(line, "batch", 2, 1));
    INFO(s.to_string());
    CHECK(s.count(CollectiveKind::kAllToAll) == 1);
    CHECK(s.total() == 1);
  }
  SECTION("sharded -> replicated is one all-gather") {
    DTensor rows = distribute(x, Layout::batch_sharded(line, "batch", 2, 0));
    CollectiveStats s = count(rows, Layout::replicated(line, 2));
    CHECK(s.count(CollectiveKind::kAllGather) == 1);
    CHECK(s.total() == 1);
  }
  SECTION("partial -> replicated is one all-reduce; partial -> sharded one reduce-scatter") {
    Layout partial = Layout::replicated(line, 2).with_partial({{"batch", ReduceOp::kSum}});
    DTensor p = distribute_with_terms(x, partial, 9);
    CollectiveStats s = count(p, Layout::replicated(line, 2));
    CHECK(s.count(CollectiveKind::kAllReduce) == 1);
    CHECK(s.total() == 1);
    s = count(p, Layout::batch_sharded(line, "batch", 2, 1));
    CHECK(s.count(CollectiveKind::kReduceScatter) == 1);
    CHECK(s.total() == 1);
  }
  SECTION("replicated -> partial is local") {
    CollectiveStats s =
        count(rep, Layout::replicated(line, 2).with_partial({{"batch", ReduceOp::kSum}}));
    CHECK(s.total() == 0);
  }
  SECTION("two mesh dims: swapping [x,y] to [y,x] takes two collectives") {
    // No tensor dim is free for an all-to-all, so one dim is gathered first; the planner picks
    // the smaller x (2 devices) for it.
    DTensor xy = distribute(x, Layout({"x", "y"}, grid));
    CollectiveStats s = count(xy, Layout({"y", "x"}, grid));
    INFO(s.to_string() << " plan "
                       << plan_relayout(xy.layout(), Layout({"y", "x"}, grid), x.shape(),
                                        DType::kF32)
                              ->to_string());
    CHECK(s.total() == 2);
    CHECK(s.count(CollectiveKind::kAllToAll) == 1);
  }
  SECTION("partial over one dim into a sharding of it is a single reduce-scatter") {
    DTensor p =
        distribute_with_terms(x, Layout({"unsharded", "y"}, grid, {{"x", ReduceOp::kSum}}), 4);
    CollectiveStats s = count(p, Layout({"x", "y"}, grid));
    CHECK(s.count(CollectiveKind::kReduceScatter) == 1);
    CHECK(s.total() == 1);
  }
  SECTION("reduce before gathering: the planner moves the fewest bytes") {
    // Partial over y and sharded over x; the target is replicated. Reducing first (all-reduce
    // over y on the x-shard) moves less than gathering the partial terms first.
    DTensor p =
        distribute_with_terms(x, Layout({"x", "unsharded"}, grid, {{"y", ReduceOp::kSum}}), 4);
    auto plan = plan_relayout(p.layout(), Layout::replicated(grid, 2), x.shape(), DType::kF32);
    INFO(plan->to_string());
    REQUIRE(plan->steps.size() >= 2);
    CHECK(plan->steps[0].kind != RelayoutStep::Kind::kAllGather);
  }
}

TEST_CASE("replicated results are stored once", "[local]") {
  Mesh line = test_mesh({{"batch", 8}});
  Tensor x = integer_tensor({16, 4}, DType::kF32, 5);
  DTensor rows = distribute(x, Layout::batch_sharded(line, "batch", 2, 0));
  DTensor rep = relayout(rows, Layout::replicated(line, 2));
  for (const Tensor& shard : rep.shards()) CHECK(shard.shares_storage_with(rep.shard(0)));
  for (int64_t i = 0; i < 8; ++i) CHECK(rep.shard(i).device().id == i);
  // distribute of a replicated layout shares the input itself.
  DTensor same = distribute(x, Layout::replicated(line, 2));
  CHECK(same.shard(7).shares_storage_with(x));
}

TEST_CASE("plans are cached") {
  clear_relayout_plan_cache();
  Mesh grid = test_mesh({{"x", 2}, {"y", 4}});
  DTensor t = distribute(integer_tensor({8, 8}, DType::kF32, 1), Layout({"x", "y"}, grid));
  relayout(t, Layout({"y", "x"}, grid));
  relayout(t, Layout({"y", "x"}, grid));
  PlanCacheStats s = relayout_plan_cache_stats();
  CHECK(s.misses == 1);
  CHECK(s.hits == 1);
  CHECK(s.size == 1);
}

TEST_CASE("relayout rejects other meshes and ranks") {
  using Catch::Message;
  Mesh a = test_mesh({{"x", 8}});
  Mesh b = test_mesh({{"y", 8}});
  DTensor t = distribute(integer_tensor({8, 8}, DType::kF32, 1), Layout::replicated(a, 2));
  CHECK_THROWS_MATCHES(relayout(t, Layout::replicated(b, 2)), LayoutError,
                       Message("[relayout] cannot move [unsharded,unsharded] on mesh x=8 to "
                               "[unsharded,unsharded] on mesh y=8"));
  CHECK_THROWS_MATCHES(relayout(t, Layout::replicated(a, 1)), LayoutError,
                       Message("[relayout] shape [8,8] with layout [unsharded,unsharded] cannot "
                               "take layout [unsharded]"));
}

TEST_CASE("regression: relayout on a mesh with ten size-1 dims plans quickly and exactly") {
  // The exact search was exponential in the mesh rank: 14 s per relayout with 10 size-1 dims.
  std::vector<MeshDim> dims = {{"x", 2}, {"y", 4}};
  for (int i = 0; i < 10; ++i) dims.push_back({"u" + std::to_string(i), 1});
  Mesh mesh = test_mesh(dims);
  Tensor x = integer_tensor({5, 7, 3}, DType::kF32, 11);
  const std::vector<std::pair<Layout, Layout>> pairs = {
      {Layout({"u0", "x", "u1"}, mesh, {{"u2", ReduceOp::kSum}, {"y", ReduceOp::kSum}}),
       Layout({"y", "u5", "x"}, mesh, {{"u7", ReduceOp::kSum}})},
      {Layout({"u0", "u1", "u2"}, mesh), Layout({"u2", "u0", "u1"}, mesh)},
      {Layout({"x", "y", "u9"}, mesh), Layout({"y", "x", "unsharded"}, mesh)},
      {Layout::replicated(mesh, 3).with_partial({{"u3", ReduceOp::kMax}, {"x", ReduceOp::kMax}}),
       Layout({"u3", "unsharded", "y"}, mesh, {{"u4", ReduceOp::kSum}})},
      {Layout({"unsharded", "u8", "unsharded"}, mesh, {{"u1", ReduceOp::kMin}}),
       Layout::replicated(mesh, 3)},
  };
  for (const auto& [a, b] : pairs) {
    check_round_trip(x, a, b, 3);
    check_round_trip(x, b, a, 4);
  }
  // Far apart: every size-1 dim changes state (the search used to visit every combination).
  std::vector<PartialDim> all_partial;
  for (int i = 2; i < 10; ++i) all_partial.push_back({"u" + std::to_string(i), ReduceOp::kSum});
  check_round_trip(x, Layout({"u0", "u1", "x"}, mesh, all_partial), Layout({"u1", "y", "u0"}, mesh),
                   5);
  std::vector<PartialDim> max_terms, sum_terms;
  for (int i = 0; i < 10; ++i) max_terms.push_back({"u" + std::to_string(i), ReduceOp::kMax});
  for (int i = 4; i < 10; ++i) sum_terms.push_back({"u" + std::to_string(i), ReduceOp::kSum});
  Tensor x4 = integer_tensor({3, 4, 2, 5}, DType::kF32, 12);
  check_round_trip(x4, Layout::replicated(mesh, 4).with_partial(max_terms),
                   Layout({"u0", "u1", "u2", "u3"}, mesh, sum_terms), 6);
  // Size-1 dims cost no data: the plan for the first pair moves what the x,y part moves alone.
  Mesh small = test_mesh({{"x", 2}, {"y", 4}});
  auto plan_small =
      plan_relayout(Layout({"unsharded", "x", "unsharded"}, small, {{"y", ReduceOp::kSum}}),
                    Layout({"y", "unsharded", "x"}, small), x.shape(), DType::kF32);
  auto plan_big = plan_relayout(pairs[0].first, pairs[0].second, x.shape(), DType::kF32);
  int big_moving_steps = 0;
  for (const RelayoutStep& step : plan_big->steps) {
    big_moving_steps += mesh.dims()[step.mesh_dim].size > 1;
  }
  CHECK(big_moving_steps == static_cast<int>(plan_small->steps.size()));
}

TEST_CASE("regression: relayout on a mesh too large to search exactly is planned greedily") {
  std::vector<MeshDim> dims;
  for (int i = 0; i < 6; ++i) dims.push_back({"m" + std::to_string(i), 2});
  Mesh mesh = test_mesh(dims);
  Tensor x = integer_tensor({3, 5, 4}, DType::kF32, 7);
  std::vector<Layout> layouts = all_layouts(mesh, 3, true);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 24; ++i) {
    const Layout& a = layouts[rng() % layouts.size()];
    const Layout& b = layouts[rng() % layouts.size()];
    check_round_trip(x, a, b, static_cast<uint64_t>(i));
  }
  // Every dim swaps its tensor dim with another's: no dim can move before one is gathered.
  check_round_trip(x, Layout({"m0", "m1", "m2"}, mesh), Layout({"m1", "m2", "m0"}, mesh), 9);
  check_round_trip(x, Layout({"m0", "m1", "m2"}, mesh, {{"m3", ReduceOp::kSum}}),
                   Layout({"m3", "m0", "unsharded"}, mesh, {{"m1", ReduceOp::kSum}}), 10);
}
