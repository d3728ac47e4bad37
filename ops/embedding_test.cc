// The vocab-parallel embedding (ops/transformer.cc): every layout of the table and of the ids on
// several meshes, vocab sizes that split evenly, unevenly and with an empty shard, against one
// device: the output bit for bit, the table's gradient bit for bit where the batch alone is split
// (and on every layout in the deterministic mode, the _deterministic target), within 1e-6
// elsewhere; the collectives of the forward and the backward; ids out of range.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/autograd.h"
#include "ops/expand.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::all_layouts;
using dtensor::testing::test_mesh;

namespace {

const std::string u = Layout::kUnsharded;

// Uniform in [-1, 1), the same on every mesh (Philox by element position).
Tensor values(const Shape& shape, uint64_t seed) {
  return to_global(random_uniform(
      shape, Layout::replicated(test_mesh({{"d", 1}}), static_cast<int64_t>(shape.size())), seed,
      -1, 1));
}

// Every id of [0, vocab), with repeats (the gradient sums them).
Tensor ids(const Shape& shape, int64_t vocab) {
  Tensor t = Tensor::empty(shape, DType::kI32);
  int32_t* p = t.data<int32_t>();
  for (int64_t i = 0; i < t.num_elements(); ++i)
    p[i] = static_cast<int32_t>((5 * i + i / 3) % vocab);
  return t;
}

double max_difference(const Tensor& a, const Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  }
  return worst;
}

struct Result {
  Tensor y, grad;
};

// The embedding's output and the table's gradient of sum(y * dy).
Result run(const Tensor& table, const Layout& table_layout, const Tensor& tokens,
           const Layout& ids_layout, const Tensor& dy) {
  const DTensor t = distribute(table, table_layout);
  GradientTape tape;
  tape.watch(t);
  const DTensor y = embedding(t, distribute(tokens, ids_layout));
  const DTensor loss =
      reduce_sum(mul(y, distribute(dy, Layout::replicated(table_layout.mesh(), 3))));
  return {to_global(y), to_global(tape.gradient(loss, {t})[0])};
}

}  // namespace

TEST_CASE("the vocab-parallel embedding gives one device's values on every layout") {
  const Mesh one = test_mesh({{"d", 1}});
  const Shape id_shape = {8, 6};
  const int64_t dim = 5;
  for (const Mesh& mesh :
       {test_mesh({{"data", 2}, {"model", 4}}), test_mesh({{"data", 2}, {"seq", 2}, {"model", 2}}),
        test_mesh({{"model", 3}})}) {
    // 16 splits evenly over 2 and 4 and unevenly over 3; 7 unevenly everywhere; 3 leaves a
    // shard empty on 4 devices.
    for (int64_t vocab : {16, 7, 3}) {
      const Tensor table = values({vocab, dim}, 1 + static_cast<uint64_t>(vocab));
      const Tensor tokens = ids(id_shape, vocab);
      const Tensor dy = values({8, 6, dim}, 2);
      const Result want =
          run(table, Layout::replicated(one, 2), tokens, Layout::replicated(one, 2), dy);
      for (const Layout& tl : all_layouts(mesh, 2, false)) {
        for (const Layout& il : all_layouts(mesh, 2, false)) {
          INFO("vocab " << vocab << ", table " << tl.to_string() << ", ids " << il.to_string());
          const Result got = run(table, tl, tokens, il, dy);
          CHECK(bitwise_equal(got.y, want.y));
          // Ids split on their first dim alone sum the batch in fixed chunks; the deterministic
          // mode sums every layout so.
          if (deterministic_sums() || !il.is_sharded(1)) {
            CHECK(bitwise_equal(got.grad, want.grad));
          } else {
            CHECK(max_difference(got.grad, want.grad) <= 1e-6);
          }
        }
      }
    }
  }
}

TEST_CASE("a batch large enough to sum in eight chunks gives one device's gradient bits") {
  // 16 x 64 ids of a 64-wide table: 65536 elements of dy, eight chunks of two rows. Replicated
  // ids fold their chunks in the kernel; batch-sharded ones too, once per partial group on the
  // group's rows put together (Stacking::fold_chunks), bf16 through the chunked partial sum.
  const Mesh one = test_mesh({{"d", 1}});
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  const Tensor table = values({50, 64}, 6), tokens = ids({16, 64}, 50),
               dy = values({16, 64, 64}, 7);
  const Result want =
      run(table, Layout::replicated(one, 2), tokens, Layout::replicated(one, 2), dy);
  for (const std::string& batch : {u, std::string("data")}) {
    for (const std::string& vocab : {u, std::string("model")}) {
      INFO("ids on " << batch << ", vocab on " << vocab);
      const Result got = run(table, Layout({vocab, u}, mesh), tokens, Layout({batch, u}, mesh), dy);
      CHECK(bitwise_equal(got.y, want.y));
      CHECK(bitwise_equal(got.grad, want.grad));
    }
  }
}

TEST_CASE("batch-sharded ids fold their chunks to one device's bits on uneven and 4-way splits") {
  // 13 rows over data=4 (4, 4, 4, 1) and data=2 (7, 6) miss the chunk boundaries (chunks of 2);
  // 16 rows fall on them. 80-wide dy: over 65536 elements, so eight chunks.
  const Mesh one = test_mesh({{"d", 1}});
  for (const int64_t batch : {13, 16}) {
    const Tensor table = values({37, 80}, 8), tokens = ids({batch, 64}, 37),
                 dy = values({batch, 64, 80}, 9);
    const Result want =
        run(table, Layout::replicated(one, 2), tokens, Layout::replicated(one, 2), dy);
    for (const Mesh& mesh :
         {test_mesh({{"data", 4}, {"model", 2}}), test_mesh({{"data", 2}, {"model", 3}})}) {
      INFO("batch " << batch << ", mesh " << mesh.to_string());
      const Result got =
          run(table, Layout({"model", u}, mesh), tokens, Layout({"data", u}, mesh), dy);
      CHECK(bitwise_equal(got.grad, want.grad));
    }
  }
}

TEST_CASE("the vocab-parallel embedding emits the collectives of a partial sum only") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  const Tensor table = values({7, 8}, 3), tokens = ids({4, 6}, 7), dy = values({4, 6, 8}, 4);
  for (const std::string& d : {u, std::string("data")}) {
    INFO("D on " << d);
    // An uneven vocab (2, 2, 2, 1 rows); D over data is gathered (the ids use data).
    const DTensor t = distribute(table, Layout({"model", d}, mesh));
    const DTensor i = distribute(tokens, Layout({"data", u}, mesh));
    GradientTape tape;
    tape.watch(t);
    reset_collective_stats();
    const DTensor y = embedding(t, i);
    CHECK(collective_stats().count(CollectiveKind::kAllGather) == (d == u ? 0 : 1));
    CHECK(collective_stats().total() == (d == u ? 0 : 1));
    CHECK(y.layout().short_string() == "[data,unsharded,unsharded] partial:sum(model)");
    const DTensor loss = reduce_sum(mul(relayout(y, Layout({"data", u, u}, mesh)),
                                        distribute(dy, Layout({"data", u, u}, mesh))));
    reset_collective_stats();
    const DTensor g = tape.gradient(loss, {t})[0];
    // The scatter is a partial sum over the ids' data: nothing moves until it is reduced.
    CHECK(collective_stats().total() == 0);
    CHECK(g.layout().short_string() == "[model,unsharded] partial:sum(data)");
    reset_collective_stats();
    const DTensor reduced = relayout(g, Layout({"model", u}, mesh));
    CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
    CHECK(collective_stats().total() == 1);
  }
}

TEST_CASE("embedding rejects ids outside the vocab with gather's error on every layout") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 4}});
  Tensor tokens = ids({2, 3}, 16);
  tokens.data<int32_t>()[1] = 16;
  const std::string want = "[gather] index 16 at position [0,1] is outside [0, 16)";
  for (const std::string& vocab : {u, std::string("model")}) {
    INFO("vocab on " << vocab);
    const DTensor t = distribute(values({16, 4}, 5), Layout({vocab, u}, mesh));
    const DTensor i = distribute(tokens, Layout({u, u}, mesh));
    CHECK_THROWS_MATCHES(embedding(t, i), InvalidArgumentError, Message(want));
    tokens.data<int32_t>()[1] = -1;
    CHECK_THROWS_MATCHES(embedding(t, distribute(tokens, Layout({u, u}, mesh))),
                         InvalidArgumentError,
                         Message("[gather] index -1 at position [0,1] is outside [0, 16)"));
    tokens.data<int32_t>()[1] = 16;
  }
}
