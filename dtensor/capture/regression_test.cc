// Regressions of issue 25, one named test per defect: aliased arguments and constants.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dtensor/capture/function.h"
#include "dtensor/creation.h"
#include "dtensor/variable.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::same_bits;
using dtensor::testing::test_mesh;

namespace {

void check_same(const std::vector<DTensor>& eager, const std::vector<DTensor>& captured) {
  REQUIRE(eager.size() == captured.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("output " << i << ": " << eager[i].short_string());
    CHECK(same_bits(eager[i], captured[i]));
  }
}

}  // namespace

TEST_CASE("issue 25: an argument passed twice gets two slots; a replay reads each") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  auto body = [](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{sub(a[0], scale(a[1], 2.0))};
  };
  Function f = function(body);
  DTensor x = random_uniform({8, 4}, rows, 1, -1, 1);
  check_same(body({x, x}), f({x, x}));
  DTensor a = random_uniform({8, 4}, rows, 2, -1, 1);
  DTensor b = random_uniform({8, 4}, rows, 3, -1, 1);
  check_same(body({a, b}), f({a, b}));
  CHECK(f.trace_count() == 1);
}

TEST_CASE("issue 25: an argument that is also a closure constant stays apart from it") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  const DTensor c = random_uniform({8, 4}, rows, 4, -1, 1);
  auto body = [&](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{add(mul(a[0], c), c)};
  };
  Function f = function(body);
  check_same(body({c}), f({c}));
  DTensor a = random_uniform({8, 4}, rows, 5, -1, 1);
  check_same(body({a}), f({a}));
}

TEST_CASE("issue 25: an argument that is a variable's value stays apart from the step's read") {
  const Mesh mesh = test_mesh({{"batch", 8}});
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  DVariable v(random_uniform({8, 4}, rows, 6, -1, 1), "v");
  auto body = [&](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{sub(a[0], exp(v.value()))};
  };
  Function f = function(body);
  check_same(body({v.value()}), f({v.value()}));
  DTensor a = random_uniform({8, 4}, rows, 7, -1, 1);
  check_same(body({a}), f({a}));
}
