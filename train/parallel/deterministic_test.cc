// The deterministic mode (DTENSOR_DETERMINISTIC=1, ops/expand.h): every plan gives one device's
// logits and gradients bit for bit, contractions split over model or seq included.
#include <cstring>

#include <catch2/catch.hpp>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/expand.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "train/parallel/transformer.h"

using namespace dtensor;
using namespace dtensor::parallel;
using dtensor::testing::test_mesh;

namespace {

TransformerConfig tiny() {
  TransformerConfig c;
  c.vocab = 24;
  c.dim = 32;
  c.heads = 4;
  c.layers = 2;
  c.dropout = 0.2;
  c.seed = 5;
  return c;
}

Tensor tokens(int64_t batch, int64_t seq, int64_t vocab, int64_t offset) {
  Tensor t = Tensor::empty({batch, seq}, DType::kI32);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + offset + i / 5) % vocab);
  }
  return t;
}

struct Result {
  Tensor logits;
  std::vector<Tensor> grads;
  std::vector<std::string> names;
};

Result run(const Mesh& mesh, const ParallelPlan& plan) {
  TransformerLM model(tiny(), mesh);
  model.parallelize(plan);
  const Layout rows = Layout::replicated(mesh, 2);
  DTensor x = distribute(tokens(8, 16, 24, 0), rows), y = distribute(tokens(8, 16, 24, 1), rows);
  std::vector<DVariable> vars = model.variables();
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  DTensor logits = model.call(x, /*training=*/true);
  DTensor loss = reduce_mean(lm_loss()(y, logits));
  std::vector<DTensor> grads = tape.gradient(loss, vars);
  Result r{to_global(logits), {}, {}};
  for (size_t i = 0; i < vars.size(); ++i) {
    r.grads.push_back(to_global(grads[i]));
    r.names.push_back(vars[i].name());
  }
  return r;
}

int64_t differing(const Tensor& got, const Tensor& want) {
  int64_t n = 0;
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    n += std::memcmp(&got.data<float>()[i], &want.data<float>()[i], sizeof(float)) != 0;
  }
  return n;
}

}  // namespace

TEST_CASE("the deterministic mode gives one device's logits and gradients bit for bit") {
  REQUIRE(deterministic_sums());
  const Result want = run(test_mesh({{"d", 1}}), {});
  const Mesh dp = test_mesh({{"data", 8}});
  const Mesh tp = test_mesh({{"model", 8}});
  const Mesh three = test_mesh({{"data", 2}, {"seq", 2}, {"model", 2}});
  const std::vector<std::pair<Mesh, ParallelPlan>> cases = {
      {dp, {"data", "", "", true}},
      {tp, {"", "model", "", false}},
      {tp, {"", "model", "model", false}},
      {three, {"data", "model", "seq", true}},
      {three, {"data", "model", "model", false}},
  };
  for (const auto& [mesh, plan] : cases) {
    INFO(mesh.dims_string() << " plan " << plan.to_string());
    const Result got = run(mesh, plan);
    CHECK(differing(got.logits, want.logits) == 0);
    for (size_t i = 0; i < got.grads.size(); ++i) {
      INFO("gradient " << want.names[i]);
      CHECK(differing(got.grads[i], want.grads[i]) == 0);
    }
  }
}
