// Regression (under mpirun -np 2): a mesh spanning the processes and a process-local mesh over
// the same dims (replica=4, device ids 0..3) used in one process. They share fingerprint(), and
// the sharding-decision and relayout-plan caches were keyed on it, so the second mesh got the
// first one's layouts: "[relayout] cannot move [replica,unsharded] on mesh replica=4 to
// [replica,unsharded] on mesh replica=4".
#include <catch2/catch.hpp>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/ops.h"
#include "runtime/process.h"

using namespace dtensor;

namespace {

struct Meshes {
  Mesh spanning;
  Mesh local;
};

Meshes same_dims_meshes() {
  const ProcessInfo p = this_process();
  REQUIRE(p.count == 2);
  Meshes m{Mesh::create({{"replica", 4}}, DeviceType::kCPU, p.index, p.count),
           Mesh::create({{"replica", 4}}, DeviceType::kCPU)};
  REQUIRE(m.spanning.fingerprint() == m.local.fingerprint());
  REQUIRE(m.spanning != m.local);
  return m;
}

// relu(x @ w) on `mesh`, gathered: x batch-sharded, w replicated, same values on any mesh.
Tensor forward(const Mesh& mesh) {
  DTensor x = random_uniform({8, 3}, Layout::batch_sharded(mesh, "replica", 2), 11, -1, 1);
  DTensor w = random_uniform({3, 5}, Layout::replicated(mesh, 2), 12, -1, 1);
  DTensor y = relu(matmul(x, w));
  REQUIRE(y.mesh() == mesh);
  return to_global(relayout(y, Layout::replicated(mesh, 2)));
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (a.data<float>()[i] != b.data<float>()[i]) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("regression: a spanning and a process-local mesh with one dim name run in turn") {
  const Meshes m = same_dims_meshes();
  const Tensor on_spanning = forward(m.spanning);
  const Tensor on_local = forward(m.local);
  const Tensor again = forward(m.spanning);
  CHECK(same_values(on_spanning, on_local));
  CHECK(same_values(on_spanning, again));
}

TEST_CASE("regression: relayout plans of alike meshes hold their own mesh's layouts") {
  const Meshes m = same_dims_meshes();
  for (const Mesh& mesh : {m.spanning, m.local}) {
    auto plan = plan_relayout(Layout::replicated(mesh, 2),
                              Layout::batch_sharded(mesh, "replica", 2), {8, 3}, DType::kF32);
    REQUIRE(plan->layouts.size() == 1);
    CHECK(plan->layouts[0].mesh() == mesh);
  }
}

TEST_CASE("regression: moving between alike meshes names what tells them apart") {
  const Meshes m = same_dims_meshes();
  const int64_t first = 2 * this_process().index;
  DTensor x = zeros({4, 2}, Layout::batch_sharded(m.spanning, "replica", 2));
  CHECK_THROWS_WITH(
      relayout(x, Layout::batch_sharded(m.local, "replica", 2)),
      fmt::format("[relayout] cannot move [replica,unsharded] on mesh replica=4 (CPU, spans 2 "
                  "processes, local ids {}-{}) to [replica,unsharded] on mesh replica=4 (CPU, "
                  "process-local, ids 0-3)",
                  first, first + 1));
  DTensor y = zeros({2, 4}, Layout::replicated(m.local, 2));
  DTensor w = zeros({4, 3}, Layout::replicated(m.spanning, 2));
  CHECK_THROWS_WITH(matmul(y, w), Catch::Contains("are on different meshes (replica=4 (CPU, "
                                                  "process-local, ids 0-3) and replica=4 (CPU, "
                                                  "spans 2 processes"));
}
