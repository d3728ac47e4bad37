// TransformerLM under every plan on 8 virtual devices gives one device's logits, loss and
// gradients (dropout on: the masks do not depend on the layout), and bad plans and configs get
// exact errors.
#include "train/parallel/transformer.h"

#include <catch2/catch.hpp>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using namespace dtensor::parallel;
using Catch::Message;
using dtensor::testing::test_mesh;

namespace {

TransformerConfig tiny() {
  TransformerConfig c;
  c.vocab = 11;
  c.dim = 16;
  c.heads = 4;
  c.layers = 2;
  c.hidden = 24;
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
  double loss;
  std::vector<Tensor> grads;
};

Result run(const Mesh& mesh, const ParallelPlan& plan) {
  TransformerLM model(tiny(), mesh);
  model.parallelize(plan);
  const Layout rows = Layout::replicated(mesh, 2);
  DTensor x = distribute(tokens(4, 8, 11, 0), rows), y = distribute(tokens(4, 8, 11, 1), rows);
  std::vector<DVariable> vars = model.variables();
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  DTensor logits = model.call(x, /*training=*/true);
  DTensor loss = reduce_mean(lm_loss()(y, logits));
  std::vector<DTensor> grads = tape.gradient(loss, vars);
  Result r{to_global(logits), to_global(loss).data<float>()[0], {}};
  for (size_t i = 0; i < vars.size(); ++i) {
    INFO(vars[i].name() << " " << grads[i].short_string() << " vs "
                        << vars[i].layout().short_string());
    CHECK(grads[i].layout().without_partial() == vars[i].layout());
    r.grads.push_back(to_global(grads[i]));
  }
  return r;
}

void check_close(const Tensor& got, const Tensor& want, double tolerance) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    INFO("element " << i);
    REQUIRE(got.data<float>()[i] == Approx(want.data<float>()[i]).margin(tolerance));
  }
}

}  // namespace

TEST_CASE("every plan gives one device's logits, loss and gradients") {
  const Result want = run(test_mesh({{"d", 1}}), {});
  const Mesh dp = test_mesh({{"data", 8}});
  const Mesh two = test_mesh({{"data", 2}, {"model", 4}});
  const Mesh three = test_mesh({{"data", 2}, {"seq", 2}, {"model", 2}});
  const std::vector<std::pair<Mesh, ParallelPlan>> cases = {
      {dp, {"data", "", "", false}},
      {dp, {"data", "", "", true}},
      {two, {"data", "model", "", false}},
      {two, {"data", "model", "model", false}},
      {two, {"data", "model", "model", true}},
      {three, {"data", "model", "seq", true}},
      {three, {"data", "model", "seq", true, true}},
      {three, {"data", "model", "model", false}},
  };
  for (const auto& [mesh, plan] : cases) {
    INFO(mesh.dims_string() << " plan " << plan.to_string());
    const Result got = run(mesh, plan);
    check_close(got.logits, want.logits, 1e-5);
    CHECK(got.loss == Approx(want.loss).epsilon(1e-6));
    REQUIRE(got.grads.size() == want.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      INFO("gradient " << i);
      check_close(got.grads[i], want.grads[i], 1e-6);
    }
  }
}

TEST_CASE("bad plans and configs get exact errors") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  TransformerLM model(tiny(), mesh);
  CHECK_THROWS_MATCHES(model.parallelize({"data", "model", "seq", false}), InvalidArgumentError,
                       Message("[TransformerLM::parallelize] mesh data=2,model=4 has no dim 'seq' "
                               "(plan data=data model=model seq=seq)"));
  CHECK_THROWS_MATCHES(model.parallelize({"data", "data", "", false}), InvalidArgumentError,
                       Message("[TransformerLM::parallelize] plan data=data model=data uses 'data' "
                               "for data and another kind"));
  CHECK_THROWS_MATCHES(model.parallelize({"", "model", "", true}), InvalidArgumentError,
                       Message("[TransformerLM::parallelize] plan model=model fsdp shards "
                               "parameters with no data dim"));
  CHECK_THROWS_MATCHES(model.parallelize({"data", "model", "", false, true}), InvalidArgumentError,
                       Message("[TransformerLM::parallelize] plan data=data model=model "
                               "reshard_after_forward reshards weights that are not sharded"));
  CHECK_THROWS_MATCHES(model.parallelize({"data", "model", "", false, false, true}),
                       InvalidArgumentError,
                       Message("[TransformerLM::parallelize] plan data=data model=model prefetch "
                               "prefetches weights that are not sharded"));
  TransformerConfig odd = tiny();
  odd.heads = 3;
  CHECK_THROWS_MATCHES(TransformerLM(odd, mesh), InvalidArgumentError,
                       Message("[TransformerLM] config layers=2 dim=16 heads=3 hidden=24 vocab=11 "
                               "dropout=0.2 needs sizes >= 1, dim divisible by heads into an even "
                               "head size and a dropout rate in [0, 1)"));
  const DTensor flat = distribute(tokens(1, 8, 11, 0), Layout::replicated(mesh, 2));
  CHECK_THROWS_MATCHES(model.call(reshape(flat, {8}), false), ShapeError,
                       Message("[TransformerLM::call] tokens i32[8] [unsharded] must be [batch, "
                               "seq] integers"));
}
