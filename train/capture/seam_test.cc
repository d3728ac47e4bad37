// The one capture seam (dtensor/step_observer.h): a recorder takes a step's work while the
// gradient tape, which only listens, still hears of plain relayouts, inside a captured step and
// outside one; who takes the work after observers come and go in any order.
#include <catch2/catch.hpp>

#include <vector>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"
#include "train/capture/function.h"

using namespace dtensor;
using dtensor::testing::same_bits;
using dtensor::testing::test_mesh;

namespace {

// A plain relayout (not traced_relayout) of a watched value on a tape made inside the step.
std::vector<DTensor> step(const std::vector<DTensor>& a, const Layout& to) {
  GradientTape tape;
  tape.watch(a[0]);
  const DTensor moved = relayout(a[0], to);
  const DTensor loss = reduce_sum(mul(moved, moved));
  return {loss, tape.gradient(loss, {a[0]})[0]};
}

}  // namespace

TEST_CASE("a tape inside a captured step differentiates through a plain relayout") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  const Layout whole = Layout::replicated(mesh, 2);
  auto body = [&](const std::vector<DTensor>& a) { return step(a, whole); };
  Function f = function(body);
  for (uint64_t seed : {1, 2, 3}) {
    const DTensor x = random_uniform({8, 4}, rows, seed, -1, 1);
    const std::vector<DTensor> eager = body({x});
    const std::vector<DTensor> captured = f({x});
    REQUIRE(captured.size() == 2);
    CHECK(same_bits(eager[0], captured[0]));
    CHECK(same_bits(eager[1], captured[1]));
    // d/dx sum(x*x) = 2x: the gradient went back through the relayout.
    CHECK(same_bits(relayout(eager[1], rows), scale(x, 2.0)));
    CHECK(StepObserver::active() == nullptr);
  }
  CHECK(f.trace_count() == 1);
}

TEST_CASE("a tape made before a captured step keeps hearing relayouts after it") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  const Layout whole = Layout::replicated(mesh, 2);
  Function f = function([&](const std::vector<DTensor>& a) { return step(a, whole); });
  GradientTape outer;
  const DTensor x = random_uniform({8, 4}, rows, 4, -1, 1);
  outer.watch(x);
  f({x});  // traces with the outer tape's listener installed beneath the recorder
  CHECK(StepObserver::active() == nullptr);
  const DTensor moved = relayout(x, whole);
  const DTensor loss = reduce_sum(mul(moved, moved));
  CHECK(same_bits(relayout(outer.gradient(loss, {x})[0], rows), scale(x, 2.0)));
}
