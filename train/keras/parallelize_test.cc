// Per-layer parallel styles (parallelize) and the LayoutMap: a Keras-style MLP and a
// sequence-parallel residual block on model=2, model=4, model=3 (uneven) and data=2,model=2
// against the same model on one device (loss and gradients within 1e-6), the collectives per
// mesh dim of the forward and the backward, and the exact error of every bad plan.
#include "train/keras/parallelize.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <optional>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/capture/function.h"
#include "train/keras/layers.h"
#include "train/keras/layout_map.h"
#include "train/keras/strategy.h"
#include "train/keras/test_problem.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using namespace dtensor::keras;
using Catch::Message;

namespace {

Mesh test_mesh(std::vector<MeshDim> dims) {
  return Mesh::create(std::move(dims), DeviceType::kCPU);
}

constexpr int64_t kBatch = 4, kSeq = 5, kDim = 8, kHidden = 10, kVocab = 11;

// Calls per "kind@dims" ("all_reduce@model").
using Counts = std::map<std::string, int64_t>;

Counts counts_of(const CollectiveListener& listener) {
  Counts out;
  for (const CollectiveRecord& r : listener.records()) {
    ++out[std::string(collective_kind_name(r.kind)) + "@" + r.dims];
  }
  return out;
}

std::string show(const Counts& c) {
  std::string s;
  for (const auto& [k, n] : c) s += k + "=" + std::to_string(n) + " ";
  return s;
}

// A MirroredStrategy over `mesh`, replicas along its first dim (variables are replicated).
MirroredStrategy strategy_on(const Mesh& mesh) {
  return MirroredStrategy(mesh, mesh.dims()[0].name);
}

// The batch over "data" when the mesh has it.
Layout input_layout(const Mesh& mesh, int64_t rank = 3) {
  return mesh.has_dim("data") ? Layout::batch_sharded(mesh, "data", rank)
                              : Layout::replicated(mesh, rank);
}

struct Result {
  double loss = 0;
  std::map<std::string, Tensor> grads;  // by variable name
  Counts forward, backward;
};

// One forward and backward of mean((model(x) - y)^2), x and y fixed random [4, 5, 8] (x token
// ids [4, 5] with `ids`).
Result run_step(Layer& model, const Mesh& mesh, bool ids = false) {
  const DTensor x =
      ids ? cast(random_uniform({kBatch, kSeq}, input_layout(mesh, 2), 3, 0, kVocab), DType::kI32)
          : random_uniform({kBatch, kSeq, kDim}, input_layout(mesh), 3, -1, 1);
  const DTensor y = random_uniform({kBatch, kSeq, kDim}, input_layout(mesh), 4, -1, 1);
  std::vector<DVariable> vars = model.variables();
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  Result s;
  std::optional<DTensor> out;
  {
    CollectiveListener listener;
    out = model.call(x, /*training=*/true);
    s.forward = counts_of(listener);
  }
  const DTensor loss = reduce_mean(square(sub(*out, y)));
  std::vector<DTensor> grads;
  {
    CollectiveListener listener;
    grads = tape.gradient(loss, vars);
    s.backward = counts_of(listener);
  }
  s.loss = to_global(loss).data<float>()[0];
  for (size_t i = 0; i < vars.size(); ++i) s.grads[vars[i].name()] = to_global(grads[i]);
  return s;
}

void check_close(const Result& got, const Result& want) {
  CHECK(got.loss == Approx(want.loss).margin(1e-6));
  REQUIRE(got.grads.size() == want.grads.size());
  for (const auto& [name, g] : want.grads) {
    const Tensor& h = got.grads.at(name);
    REQUIRE(h.shape() == g.shape());
    for (int64_t i = 0; i < g.num_elements(); ++i) {
      INFO(name << " element " << i);
      REQUIRE(h.data<float>()[i] == Approx(g.data<float>()[i]).margin(1e-6));
    }
  }
}

Sequential mlp(const Mesh& mesh) {
  MirroredStrategy strategy = strategy_on(mesh);
  auto scope = strategy.scope();
  return Sequential(kDim,
                    {Dense(kDim, relu, "in"), Dense(kHidden, relu, "fc1"), Dense(kDim, {}, "fc2"),
                     Dense(kHidden, gelu, "fc3"), Dense(kDim, {}, "fc4")},
                    7);
}

// x + dropout(fc2(fc1(norm(x)))): a pre-norm residual MLP block.
class Block : public Layer {
 public:
  Block(std::string name, uint64_t seed)
      : Layer(std::move(name)),
        norm_(1e-3, "norm"),
        fc1_(kHidden, relu, "fc1"),
        fc2_(kDim, {}, "fc2"),
        drop_(0.25, seed, "drop") {
    norm_.build(kDim);
    fc1_.build(kDim, seed);
    fc2_.build(kHidden, seed + 1);
  }
  const char* kind() const override { return "Block"; }
  std::vector<Layer*> sublayers() override { return {&norm_, &fc1_, &fc2_, &drop_}; }
  std::vector<DVariable> variables() const override {
    std::vector<DVariable> out;
    for (const Layer* l : std::vector<const Layer*>{&norm_, &fc1_, &fc2_}) {
      for (const DVariable& v : l->variables()) out.push_back(v);
    }
    return out;
  }
  DTensor call(const DTensor& x, bool training) override {
    DTensor h = fc2_.call(fc1_.call(norm_.call(x, training), training), training);
    return add(x, drop_.call(h, training));
  }

 private:
  LayerNormalization norm_;
  Dense fc1_, fc2_;
  Dropout drop_;
};

// Two blocks, after an embedding of token ids with `embed`.
class Tower : public Layer {
 public:
  explicit Tower(const Mesh& mesh, bool embed = false) : Layer("tower") {
    MirroredStrategy strategy = strategy_on(mesh);
    auto scope = strategy.scope();
    if (embed) {
      embed_.emplace(kVocab, kDim, "embed");
      embed_->build(5);
    }
    blocks_.emplace_back("block0", 11);
    blocks_.emplace_back("block1", 21);
  }
  const char* kind() const override { return "Tower"; }
  std::vector<Layer*> sublayers() override {
    std::vector<Layer*> out;
    if (embed_) out.push_back(&*embed_);
    for (Block& b : blocks_) out.push_back(&b);
    return out;
  }
  std::vector<DVariable> variables() const override {
    std::vector<DVariable> out = embed_ ? embed_->variables() : std::vector<DVariable>{};
    for (const Block& b : blocks_) {
      for (const DVariable& v : b.variables()) out.push_back(v);
    }
    return out;
  }
  DTensor call(const DTensor& x, bool training) override {
    DTensor h = embed_ ? embed_->call(x, training) : x;
    for (Block& b : blocks_) h = b.call(h, training);
    return h;
  }

 private:
  std::optional<Embedding> embed_;
  std::vector<Block> blocks_;
};

const ParallelizePlan kMegatron = {{"fc1", ColwiseParallel()},
                                   {"fc2", RowwiseParallel()},
                                   {"fc3", ColwiseParallel()},
                                   {"fc4", RowwiseParallel()}};

const ParallelizePlan kSequenceParallel = {
    {"block*/norm", SequenceParallel()},
    {"block*/fc1", ColwiseParallel().input_layouts(Shard(1))},
    {"block*/fc2", RowwiseParallel().output_layouts(Shard(1))},
    {"block*/drop", SequenceParallel()}};

std::vector<Mesh> meshes() {
  return {test_mesh({{"model", 2}}), test_mesh({{"model", 4}}), test_mesh({{"model", 3}}),
          test_mesh({{"data", 2}, {"model", 2}})};
}

}  // namespace

TEST_CASE("colwise then rowwise: one device's loss and gradients, one all-reduce each way") {
  Sequential one = mlp(test_mesh({{"d", 1}}));
  const Result want = run_step(one, test_mesh({{"d", 1}}));
  for (const Mesh& mesh : meshes()) {
    INFO(mesh.dims_string());
    Sequential model = mlp(mesh);
    parallelize(model, mesh, kMegatron);
    CHECK(model.layers()[1].variables()[0].layout().short_string() == "[unsharded,model]");
    CHECK(model.layers()[1].variables()[1].layout().short_string() == "[model]");
    CHECK(model.layers()[2].variables()[0].layout().short_string() == "[model,unsharded]");
    CHECK(model.layers()[2].variables()[1].layout().short_string() == "[unsharded]");
    CHECK(model.layers()[0].variables()[0].layout().short_string() == "[unsharded,unsharded]");
    const Result got = run_step(model, mesh);
    check_close(got, want);
    // Two colwise/rowwise pairs: the rowwise sums all-reduced forward, the colwise inputs'
    // gradients all-reduced backward (the first pair's too: "in" needs it). Over data, each
    // variable's gradient is all-reduced once.
    Counts forward = {{"all_reduce@model", 2}};
    Counts backward = {{"all_reduce@model", 2}};
    if (mesh.has_dim("data")) backward["all_reduce@data"] = 10;
    CHECK(show(got.forward) == show(forward));
    CHECK(show(got.backward) == show(backward));
  }
}

TEST_CASE("sequence parallel blocks: an all-gather and a reduce-scatter each way per block") {
  Tower one(test_mesh({{"d", 1}}));
  const Result want = run_step(one, test_mesh({{"d", 1}}));
  for (const Mesh& mesh : meshes()) {
    INFO(mesh.dims_string());
    Tower model(mesh);
    parallelize(model, mesh, kSequenceParallel);
    CHECK(model.sublayers()[0]->sublayers()[1]->style()->to_string() ==
          "ColwiseParallel(input_layouts=Shard(1))");
    const Result got = run_step(model, mesh);
    check_close(got, want);
    // Per block, forward: fc1's input gathered along the sequence, fc2's sum reduce-scattered
    // onto it. Backward: the reverse, and the gradients of the replicated vectors that meet
    // sequence-sharded activations (norm's gamma and beta, fc2's bias: partial sums over the
    // sequence shards) all-reduced.
    Counts forward = {{"all_gather@model", 2}, {"reduce_scatter@model", 2}};
    Counts backward = {
        {"all_gather@model", 2}, {"reduce_scatter@model", 2}, {"all_reduce@model", 6}};
    if (mesh.has_dim("data")) backward["all_reduce@data"] = 12;
    CHECK(show(got.forward) == show(forward));
    CHECK(show(got.backward) == show(backward));
  }
}

TEST_CASE("a vocab-sharded embedding reduce-scatters onto the sequence-parallel blocks") {
  Tower one(test_mesh({{"d", 1}}), /*embed=*/true);
  const Result want = run_step(one, test_mesh({{"d", 1}}), /*ids=*/true);
  ParallelizePlan plan = kSequenceParallel;
  plan.emplace_back("embed", RowwiseParallel().output_layouts(Shard(1)));
  for (const Mesh& mesh : meshes()) {
    INFO(mesh.dims_string());
    Tower model(mesh, /*embed=*/true);
    parallelize(model, mesh, plan);
    CHECK(model.variables()[0].layout().short_string() == "[model,unsharded]");
    const Result got = run_step(model, mesh, /*ids=*/true);
    check_close(got, want);
    // The blocks' collectives, and the embedding's partial sum reduce-scattered (forward) and
    // its gradient gathered back (backward). Nothing moves the ids or the table's gradient.
    Counts forward = {{"all_gather@model", 2}, {"reduce_scatter@model", 3}};
    Counts backward = {
        {"all_gather@model", 3}, {"reduce_scatter@model", 2}, {"all_reduce@model", 6}};
    if (mesh.has_dim("data")) backward["all_reduce@data"] = 13;
    CHECK(show(got.forward) == show(forward));
    CHECK(show(got.backward) == show(backward));
  }
  // The table split over the features instead: the same values.
  const Mesh mesh = test_mesh({{"model", 4}});
  Tower model(mesh, /*embed=*/true);
  parallelize(model, mesh, {{"embed", ColwiseParallel()}});
  CHECK(model.variables()[0].layout().short_string() == "[unsharded,model]");
  check_close(run_step(model, mesh, /*ids=*/true), want);
}

TEST_CASE("output layouts: colwise gathered, rowwise left partial for its consumer") {
  Sequential one = mlp(test_mesh({{"d", 1}}));
  const Result want = run_step(one, test_mesh({{"d", 1}}));
  const Mesh mesh = test_mesh({{"model", 4}});
  Sequential model = mlp(mesh);
  parallelize(model, mesh,
              {{"fc1", ColwiseParallel().output_layouts(Replicate())},
               {"fc2", RowwiseParallel().input_layouts(Replicate()).output_layouts(Partial())},
               {"fc?", ColwiseParallel()}});
  // fc1 and fc2 take their exact entries, fc3 and fc4 the pattern; "in" none.
  CHECK(model.layers()[4].style()->name() == std::string("ColwiseParallel"));
  CHECK_FALSE(model.layers()[0].style().has_value());
  const Result got = run_step(model, mesh);
  check_close(got, want);
  // fc1's output gathered, fc2's sum all-reduced only where fc3 needs it whole, fc3's sharded
  // output gathered for fc4 (colwise again).
  CHECK(show(got.forward) == "all_gather@model=2 all_reduce@model=1 ");
}

TEST_CASE("one layer in one style") {
  const Mesh mesh = test_mesh({{"model", 2}});
  MirroredStrategy strategy = strategy_on(mesh);
  auto scope = strategy.scope();
  Dense d(6, {}, "d");
  d.build(4, 1);
  parallelize(d, mesh, ColwiseParallel());
  CHECK(d.variables()[0].layout().short_string() == "[unsharded,model]");
  CHECK(path_matches("block*/fc?", "block12/fc1"));
  CHECK_FALSE(path_matches("block*/fc?", "block1/x/fc1"));
  CHECK_FALSE(path_matches("*", "a/b"));
  CHECK(path_matches("*/*", "a/b"));
}

TEST_CASE("bad plans get exact errors and leave the model as it was") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 2}});
  Sequential model = mlp(mesh);
  auto fails = [&](const ParallelizePlan& plan) {
    return [&model, &mesh, plan] { parallelize(model, mesh, plan); };
  };
  CHECK_THROWS_MATCHES(fails({{"fc1", ColwiseParallel()}, {"fc9", RowwiseParallel()}})(),
                       InvalidArgumentError,
                       Message("[parallelize] no layer of Sequential 'sequential' matches 'fc9' "
                               "(layers: in, fc1, fc2, fc3, fc4)"));
  CHECK_THROWS_MATCHES(fails({{"fc*", ColwiseParallel()}, {"*1", RowwiseParallel()}})(),
                       InvalidArgumentError,
                       Message("[parallelize] layer 'fc1' matches both 'fc*' and '*1'"));
  CHECK_THROWS_MATCHES(
      fails({{"fc1", ColwiseParallel()}, {"fc2", SequenceParallel()}})(), InvalidArgumentError,
      Message("[parallelize] SequenceParallel() on Dense 'fc2' (kernel f32[10,8] "
              "[unsharded,unsharded], bias f32[8] [unsharded]): Dense takes ColwiseParallel or "
              "RowwiseParallel"));
  CHECK_THROWS_MATCHES(
      fails({{"fc1", ColwiseParallel().over("tp")}})(), InvalidArgumentError,
      Message("[parallelize] ColwiseParallel(mesh_dim=tp) on Dense 'fc1' (kernel f32[8,10] "
              "[unsharded,unsharded], bias f32[10] [unsharded]): mesh data=2,model=2 has no dim "
              "'tp'"));
  CHECK_THROWS_MATCHES(
      fails({{"fc1", RowwiseParallel().output_layouts(Partial())}})(), InvalidArgumentError,
      Message("[parallelize] RowwiseParallel(output_layouts=Partial()) on Dense 'fc1' (kernel "
              "f32[8,10] [unsharded,unsharded], bias f32[10] [unsharded]): its activation needs "
              "the whole sum, not Partial()"));
  CHECK_THROWS_MATCHES(
      fails({{"fc2", ColwiseParallel().output_layouts(Partial())}})(), InvalidArgumentError,
      Message("[parallelize] ColwiseParallel(output_layouts=Partial()) on Dense 'fc2' (kernel "
              "f32[10,8] [unsharded,unsharded], bias f32[8] [unsharded]): only RowwiseParallel "
              "leaves a partial sum"));
  CHECK_THROWS_MATCHES(
      fails({{"fc2", RowwiseParallel().input_layouts(Partial())}})(), InvalidArgumentError,
      Message("[parallelize] RowwiseParallel(input_layouts=Partial()) on Dense 'fc2' (kernel "
              "f32[10,8] [unsharded,unsharded], bias f32[8] [unsharded]): no layer computes on a "
              "partial sum"));
  // Variables built on another mesh.
  const Mesh other = test_mesh({{"model", 4}});
  CHECK_THROWS_MATCHES(
      parallelize(model, other, {{"fc1", ColwiseParallel()}}), MeshError,
      Message("[parallelize] ColwiseParallel() on Dense 'fc1' (kernel f32[8,10] "
              "[unsharded,unsharded], bias f32[10] [unsharded]): variable 'fc1/kernel' lives on "
              "mesh data=2,model=2, not on model=4"));
  // Nothing moved.
  for (const DVariable& v : model.variables()) CHECK_FALSE(v.layout().sharded_mask());

  Dense unbuilt(4, {}, "late");
  CHECK_THROWS_MATCHES(parallelize(unbuilt, mesh, RowwiseParallel()), InvalidArgumentError,
                       Message("[parallelize] RowwiseParallel() on Dense 'late': not built"));
  Tower tower(mesh, /*embed=*/true);
  CHECK_THROWS_MATCHES(parallelize(tower, mesh, {{"embed", SequenceParallel()}}),
                       InvalidArgumentError,
                       Message("[parallelize] SequenceParallel() on Embedding 'embed' (embeddings "
                               "f32[11,8] [unsharded,unsharded]): Embedding takes ColwiseParallel "
                               "or RowwiseParallel"));
  Dropout drop(0.5, 1, "drop");
  CHECK_THROWS_MATCHES(parallelize(drop, mesh, ColwiseParallel()), InvalidArgumentError,
                       Message("[parallelize] ColwiseParallel() on Dropout 'drop': Dropout takes "
                               "SequenceParallel"));
}

TEST_CASE("inputs that do not fit a style get exact errors at call") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 2}});
  const DTensor x = random_uniform({kBatch, kSeq, kDim}, input_layout(mesh), 3, -1, 1);
  // The message of the E that model.call(x) throws after parallelize(model, plan).
  auto call_error = [&](Layer&& model, const ParallelizePlan& plan, bool training) {
    parallelize(model, mesh, plan);
    try {
      model.call(x, training);
    } catch (const LayoutError& e) {
      return std::string("LayoutError ") + e.what();
    } catch (const ShapeError& e) {
      return std::string("ShapeError ") + e.what();
    }
    return std::string("nothing thrown");
  };
  CHECK(call_error(mlp(mesh), {{"in", ColwiseParallel().input_layouts(Shard(1))}}, false) ==
        "LayoutError [Dense::call] layer 'in' (ColwiseParallel(input_layouts=Shard(1))) takes its "
        "input as Shard(1) along 'model', got f32[4,5,8] [data,unsharded,unsharded]");
  CHECK(call_error(Tower(mesh), {{"block0/norm", SequenceParallel().input_layouts(Shard(3))}},
                   false) ==
        "ShapeError [LayerNormalization::call] layer 'norm' "
        "(SequenceParallel(input_layouts=Shard(3))): input_layouts: Shard(3) is outside a rank-3 "
        "tensor");
  CHECK(call_error(Tower(mesh), {{"block0/drop", SequenceParallel().output_layouts(Shard(0))}},
                   true) ==
        "ShapeError [Dropout::call] layer 'drop' (SequenceParallel(output_layouts=Shard(0))): "
        "output f32[4,5,8] [data,model,unsharded]: Shard(0) over 'model' needs dim 0 of "
        "[data,model,unsharded], sharded over 'data'");
}

TEST_CASE("a LayoutMap places variables as they are built") {
  Sequential one = mlp(test_mesh({{"d", 1}}));
  const Result want = run_step(one, test_mesh({{"d", 1}}));
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 2}});
  LayoutMap map;
  map.set("fc[13]/kernel", {"unsharded", "model"});
  map.set("fc[13]/bias", {"model"});
  map.set("fc[24]/kernel", {"model", "unsharded"});
  std::optional<Sequential> model;
  map.scope([&] { model.emplace(mlp(mesh)); });
  CHECK(model->layers()[1].variables()[0].layout().short_string() == "[unsharded,model]");
  CHECK(model->layers()[2].variables()[0].layout().short_string() == "[model,unsharded]");
  CHECK(model->layers()[2].variables()[1].layout().short_string() == "[unsharded]");
  check_close(run_step(*model, mesh), want);

  LayoutMap bad;
  bad.set("fc1/kernel", {"model"});
  auto build_with = [&mesh](const LayoutMap& m) { m.scope([&] { mlp(mesh); }); };
  CHECK_THROWS_MATCHES(build_with(bad), LayoutError,
                       Message("[LayoutMap] variable 'fc1/kernel' of shape [8,10] gets layout "
                               "[model] of 1 dims"));
  LayoutMap twice;
  twice.set("kernel", {"unsharded", "model"});
  twice.set("fc.*", {"model", "unsharded"});
  CHECK_THROWS_MATCHES(build_with(twice), InvalidArgumentError,
                       Message("[LayoutMap] variable 'fc1/kernel' matches 'kernel' and 'fc.*'"));
  LayoutMap unknown;
  unknown.set("in/bias", {"tp"});
  CHECK_THROWS_WITH(build_with(unknown),
                    Catch::StartsWith("[LayoutMap] variable 'in/bias' of shape [8]: layout [tp] "
                                      "on mesh data=2,model=2: "));
  CHECK_THROWS_AS(map.set("fc(", {"model"}), InvalidArgumentError);
  CHECK_THROWS_WITH(map.set("fc(", {"model"}),
                    Catch::StartsWith("[LayoutMap::set] 'fc(' is not a regex: "));
}

TEST_CASE("a captured Adam step of styled layers replays the eager step's bits") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 2}});
  Tower eager(mesh), captured(mesh);
  parallelize(eager, mesh, kSequenceParallel);
  parallelize(captured, mesh, kSequenceParallel);
  const DTensor x = random_uniform({kBatch, kSeq, kDim}, input_layout(mesh), 3, -1, 1);
  Adam eager_adam(1e-2), captured_adam(1e-2);
  auto train_step = [&x](Layer& model, Adam& adam) {
    const std::vector<DVariable> vars = model.variables();
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    const DTensor loss = reduce_mean(square(model.call(x, /*training=*/true)));
    adam.apply(vars, tape.gradient(loss, vars));
    return loss;
  };
  Function step([&](const std::vector<DTensor>&) {
    return std::vector<DTensor>{train_step(captured, captured_adam)};
  });
  for (int i = 0; i < 4; ++i) {
    INFO("step " << i);
    const float want = to_global(train_step(eager, eager_adam)).data<float>()[0];
    CHECK(to_global(step({})[0]).data<float>()[0] == want);
  }
  CHECK(step.trace_count() == 1);
  const std::vector<DVariable> a = eager.variables(), b = captured.variables();
  for (size_t k = 0; k < a.size(); ++k) {
    INFO(a[k].name());
    CHECK(b[k].layout() == a[k].layout());
    const Tensor ga = to_global(a[k].value()), gb = to_global(b[k].value());
    CHECK(std::memcmp(ga.raw_data(), gb.raw_data(), ga.num_elements() * sizeof(float)) == 0);
  }
}

TEST_CASE("fit trains a model split per layer as it trains the replicated one") {
  const Mesh mesh = test_mesh({{"data", 2}, {"model", 2}});
  auto strategy = std::make_shared<MirroredStrategy>(mesh, "data");
  testing::Problem plain(strategy), split(strategy);
  parallelize(split.model, mesh, {{"dense_0", ColwiseParallel()}, {"dense_1", RowwiseParallel()}});
  plain.trainer.fit(plain.train, testing::quiet(2));
  split.trainer.fit(split.train, testing::quiet(2));
  CHECK(split.model.variables()[0].layout().short_string() == "[unsharded,model]");
  const std::vector<Tensor> want = plain.weights(), got = split.weights();
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    for (int64_t i = 0; i < want[k].num_elements(); ++i) {
      INFO("weight " << k << " element " << i);
      REQUIRE(got[k].data<float>()[i] == Approx(want[k].data<float>()[i]).margin(1e-5));
    }
  }
  CHECK(split.trainer.evaluate(split.test).at("loss") ==
        Approx(plain.trainer.evaluate(plain.test).at("loss")).margin(1e-5));
}
