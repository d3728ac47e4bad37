// The transformer ops (ops/transformer.cc): the collectives their sharded forms emit (vocab,
// heads and model dims stay sharded) and their errors, exactly. Values and gradients on random
// layouts against one device and finite differences are ops:gradient_test's rows.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/relayout.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::test_mesh;

namespace {

Tensor values(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

Tensor ids(const Shape& shape, int64_t below) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int32_t>()[i] = (7 * i + 3) % below;
  return t;
}

void check_same(const Tensor& got, const Tensor& want, double tolerance) {
  REQUIRE(got.shape() == want.shape());
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    INFO("element " << i);
    CHECK(got.data<float>()[i] == Approx(want.data<float>()[i]).margin(tolerance));
  }
}

DTensor on(const Tensor& t, const Mesh& mesh, std::vector<std::string> specs) {
  return distribute(t, Layout(specs, mesh));
}

}  // namespace

TEST_CASE("sharded transformer ops emit only the collectives their layouts force") {
  Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  Mesh one = test_mesh({{"d", 1}});
  const std::string u = Layout::kUnsharded;

  SECTION("a vocab-sharded embedding is a partial sum, reduced once") {
    Tensor table = values({16, 8}, 1), tokens = ids({4, 6}, 16);
    DTensor t = on(table, mesh, {"model", u});
    DTensor i = on(tokens, mesh, {"data", u});
    reset_collective_stats();
    DTensor y = embedding(t, i);
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout().short_string() == "[data,unsharded,unsharded] partial:sum(model)");
    DTensor r = relayout(y, Layout({"data", u, u}, mesh));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
    check_same(to_global(r), to_global(embedding(on(table, one, {u, u}), on(tokens, one, {u, u}))),
               0);
  }
  SECTION("attention with heads over model and batch over data emits nothing") {
    Tensor q = values({2, 4, 6, 8}, 2), k = values({2, 4, 6, 8}, 3), v = values({2, 4, 6, 8}, 4);
    const std::vector<std::string> bh = {"data", "model", u, u};
    reset_collective_stats();
    DTensor y = scaled_dot_product_attention(on(q, mesh, bh), on(k, mesh, bh), on(v, mesh, bh));
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == Layout(bh, mesh));
    const std::vector<std::string> whole = {u, u, u, u};
    check_same(to_global(y),
               to_global(scaled_dot_product_attention(on(q, one, whole), on(k, one, whole),
                                                      on(v, one, whole))),
               1e-6);
  }
  SECTION("fused attention: no collectives, the same bits on every split of batch and heads") {
    // T = 70 crosses the kernel's query (16) and key (64) blocks.
    Tensor q = values({2, 4, 70, 8}, 8), k = values({2, 4, 70, 8}, 9),
           v = values({2, 4, 70, 6}, 10);
    const std::vector<std::string> whole = {u, u, u, u};
    const Tensor want =
        to_global(fused_attention(on(q, one, whole), on(k, one, whole), on(v, one, whole)));
    for (const std::vector<std::string>& bh : {std::vector<std::string>{"data", "model", u, u},
                                               {u, "model", u, u},
                                               {"model", "data", u, u}}) {
      reset_collective_stats();
      DTensor y = fused_attention(on(q, mesh, bh), on(k, mesh, bh), on(v, mesh, bh));
      CHECK(collective_stats().total() == 0);
      CHECK(y.layout() == Layout(bh, mesh));
      const Tensor got = to_global(y);
      CHECK(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()) == 0);  // bit for bit
    }
    check_same(want,
               to_global(scaled_dot_product_attention(on(q, one, whole), on(k, one, whole),
                                                      on(v, one, whole))),
               1e-6);
  }
  SECTION("rms_norm over a model-sharded dim reduces one [..., 1] mean square") {
    Tensor x = values({4, 16}, 5), g = values({16}, 6);
    reset_collective_stats();
    DTensor y = rms_norm(on(x, mesh, {"data", "model"}), on(g, mesh, {"model"}));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
    // Bytes count every local device's input shard: 8 devices of f32[2,1].
    CHECK(collective_stats().bytes == 8 * 2 * 1 * 4);
    CHECK(y.layout() == Layout({"data", "model"}, mesh));
  }
  SECTION("loss parallel: vocab-sharded logits are never gathered") {
    Tensor logits = values({4, 6, 16}, 7), labels = ids({4, 6}, 16);
    reset_collective_stats();
    DTensor loss = sparse_softmax_cross_entropy(on(logits, mesh, {"data", u, "model"}),
                                                on(labels, mesh, {"data", u}));
    // The max, the sum of exps and the picked logit: f32[2,6] on each of 8 devices, each.
    CHECK(collective_stats().count(CollectiveKind::kAllGather) == 0);
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 3);
    CHECK(collective_stats().total() == 3);
    CHECK(collective_stats().bytes == 3 * 8 * 2 * 6 * 4);
    CHECK(loss.layout() == Layout({"data", u}, mesh));
  }
  SECTION("rotary embedding keeps a sequence-sharded x sharded") {
    Tensor x = values({2, 8, 4}, 8);
    reset_collective_stats();
    DTensor y = rotary_embedding(on(x, mesh, {"data", "model", u}));
    CHECK(collective_stats().total() == 0);
    CHECK(y.layout() == Layout({"data", "model", u}, mesh));
    check_same(to_global(y), to_global(rotary_embedding(on(x, one, {u, u, u}))), 1e-6);
  }
}

TEST_CASE("transformer ops reject bad inputs with clear errors") {
  Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  const std::string u = Layout::kUnsharded;
  DTensor table = on(values({16, 8}, 1), mesh, {"model", u});
  DTensor tokens = on(ids({4, 6}, 16), mesh, {"data", u});
  DTensor x = on(values({4, 5}, 2), mesh, {"data", u});
  CHECK_THROWS_MATCHES(embedding(table, x), DTypeError,
                       Message("[embedding] ids f32[4,5] [data,unsharded] must be i32 or i64"));
  CHECK_THROWS_MATCHES(embedding(tokens, tokens), DTypeError,
                       Message("[embedding] unsupported dtype i32: i32[4,6] [data,unsharded]"));
  DTensor table3 = on(values({2, 8, 2}, 3), mesh, {u, "model", u});
  CHECK_THROWS_MATCHES(
      embedding(table3, tokens), ShapeError,
      Message("[embedding] table f32[2,8,2] [unsharded,model,unsharded] must be [vocab, "
              "dim] (ids i32[4,6] [data,unsharded])"));
  DTensor gamma4 = on(values({4}, 4), mesh, {u});
  CHECK_THROWS_MATCHES(rms_norm(x, gamma4), ShapeError,
                       Message("[rms_norm] gamma f32[4] [unsharded] must be [D] of x's dtype for x "
                               "f32[4,5] [data,unsharded]"));
  DTensor gamma5 = on(values({5}, 4), mesh, {u});
  CHECK_THROWS_MATCHES(rms_norm(x, gamma5, -1.0), InvalidArgumentError,
                       Message("[rms_norm] eps must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(rotary_embedding(x), ShapeError,
                       Message("[rotary_embedding] x f32[4,5] [data,unsharded] must be [..., T, D] "
                               "with an even D > 0"));
  DTensor even = on(values({4, 6}, 2), mesh, {"data", "model"});
  CHECK_THROWS_MATCHES(
      rotary_embedding(even, 1.0), InvalidArgumentError,
      Message("[rotary_embedding] base 1 must be > 1 for x f32[4,6] [data,model]"));
  DTensor q = on(values({2, 3, 4}, 5), mesh, {"data", u, u});
  DTensor k = on(values({2, 5, 4}, 6), mesh, {"data", "model", u});
  CHECK_THROWS_MATCHES(
      scaled_dot_product_attention(q, k, k), ShapeError,
      Message("[scaled_dot_product_attention] q f32[2,3,4] [data,unsharded,unsharded], "
              "k f32[2,5,4] [data,model,unsharded] and v f32[2,5,4] "
              "[data,model,unsharded] must be [..., Tq, D], [..., Tk, D] and "
              "[..., Tk, Dv] of one dtype (Tq == Tk when causal)"));
  CHECK_THROWS_MATCHES(
      scaled_dot_product_attention(q, k, q, false), ShapeError,
      Message("[scaled_dot_product_attention] q f32[2,3,4] [data,unsharded,unsharded], "
              "k f32[2,5,4] [data,model,unsharded] and v f32[2,3,4] "
              "[data,unsharded,unsharded] must be [..., Tq, D], [..., Tk, D] and "
              "[..., Tk, Dv] of one dtype (Tq == Tk when causal)"));
  DTensor flat = on(values({4, 6}, 7), mesh, {"data", u});
  CHECK_THROWS_MATCHES(
      fused_attention(flat, flat, flat), ShapeError,
      Message("[fused_attention] q f32[4,6] [data,unsharded], k f32[4,6] [data,unsharded] and v "
              "f32[4,6] [data,unsharded] must be [..., Tq, D], [..., Tk, D] and [..., Tk, Dv] of "
              "one dtype and rank >= 3 (Tq == Tk when causal)"));
  DTensor half = cast(q, DType::kBF16);
  CHECK_THROWS_MATCHES(fused_attention(half, half, half), DTypeError,
                       Message("[fused_attention] unsupported dtype bf16: bf16[2,3,4] "
                               "[data,unsharded,unsharded] (f32 and f64 only)"));
}

TEST_CASE("fused attention's gradients match the composed op's across kernel blocks") {
  Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  const std::string u = Layout::kUnsharded;
  const std::vector<std::string> bh = {"data", "model", u, u};
  // T = 70 crosses the query (16) and key (64) blocks.
  DTensor q = on(values({2, 4, 70, 8}, 11), mesh, bh), k = on(values({2, 4, 70, 8}, 12), mesh, bh);
  DTensor v = on(values({2, 4, 70, 6}, 13), mesh, bh), w = on(values({2, 4, 70, 6}, 14), mesh, bh);
  using Attention = DTensor (*)(const DTensor&, const DTensor&, const DTensor&, bool);
  auto grads = [&](Attention attend) {
    GradientTape tape;
    for (const DTensor* x : {&q, &k, &v}) tape.watch(*x);
    DTensor loss = reduce_sum(mul(attend(q, k, v, true), w));
    return tape.gradient(loss, std::vector<DTensor>{q, k, v});
  };
  const std::vector<DTensor> fused = grads(&fused_attention);
  const std::vector<DTensor> composed = grads(&scaled_dot_product_attention);
  for (size_t i = 0; i < 3; ++i) {
    INFO("input " << i);
    CHECK(fused[i].layout() == Layout(bh, mesh));
    check_same(to_global(fused[i]), to_global(composed[i]), 2e-5);
  }
}
