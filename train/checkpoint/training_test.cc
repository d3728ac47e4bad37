// Training resumes exactly: a run interrupted by save and restore (into fresh objects, on the
// same or another mesh) takes the same steps as one that was not.
#include <catch2/catch.hpp>
#include <random>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint_testing;

namespace {

constexpr int64_t kExamples = 48, kIn = 8, kHidden = 12, kClasses = 4;

struct Examples {
  Tensor features, labels;
};

Examples examples() {
  Examples e{Tensor::empty({kExamples, kIn}, DType::kF32), Tensor::empty({kExamples}, DType::kI32)};
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t i = 0; i < kExamples * kIn; ++i) e.features.data<float>()[i] = unit(rng);
  for (int64_t i = 0; i < kExamples; ++i) e.labels.data<int32_t>()[i] = static_cast<int32_t>(i % 4);
  return e;
}

// A two-layer MLP trained with Adam on a shuffled dataset; `model_parallel` shards the hidden
// layer over the mesh's "model" dim (Megatron-style), otherwise the weights are replicated.
struct Run {
  Mesh mesh;
  DVariable w1, b1, w2;
  Adam adam{0.05};
  data::Dataset train;
  int64_t epoch = 0;
  Checkpoint checkpoint;

  Run(const Mesh& m, bool model_parallel, uint64_t seed, const Examples& e)
      : mesh(m),
        w1(random_uniform(
               {kIn, kHidden},
               model_parallel ? Layout({"unsharded", "model"}, m) : Layout::replicated(m, 2), seed,
               -0.5, 0.5),
           "dense_0/kernel"),
        b1(zeros({kHidden}, model_parallel ? Layout({"model"}, m) : Layout::replicated(m, 1)),
           "dense_0/bias"),
        w2(random_uniform(
               {kHidden, kClasses},
               model_parallel ? Layout({"model", "unsharded"}, m) : Layout::replicated(m, 2),
               seed + 1, -0.5, 0.5),
           "dense_1/kernel"),
        train(e.features, e.labels, m, "batch") {
    train.shuffle(9).batch(16).repeat();
    checkpoint.add_variables("model", vars());
    checkpoint.add_optimizer("adam", adam);
    checkpoint.add_dataset("train", train);
    checkpoint.add_int("epoch", &epoch);
  }

  std::vector<DVariable> vars() const { return {w1, b1, w2}; }

  // One training step; returns the loss.
  Tensor step() {
    data::Batch batch = *train.next();
    epoch = batch.epoch;
    GradientTape tape;
    for (const DVariable& v : vars()) tape.watch(v);
    DTensor hidden = relu(add(matmul(batch.features, w1.value()), b1.value()));
    DTensor loss =
        reduce_mean(sparse_softmax_cross_entropy(matmul(hidden, w2.value()), batch.labels));
    adam.apply(vars(), tape.gradient(loss, vars()));
    return to_global(loss);
  }

  std::vector<Tensor> state() const {
    std::vector<Tensor> out;
    for (const DVariable& v : vars()) out.push_back(to_global(v.value()));
    for (const auto& [name, slot] : adam.slots()) out.push_back(to_global(slot.value()));
    return out;
  }

  // Takes over `other`'s state without a checkpoint: the reference for a moved run.
  void copy_state_from(const Run& other) {
    std::vector<DVariable> mine = vars(), theirs = other.vars();
    for (size_t i = 0; i < mine.size(); ++i) {
      mine[i].assign(distribute(to_global(theirs[i].value()), mine[i].layout()));
    }
    adam.build(mine);
    auto my_slots = adam.slots();
    auto their_slots = other.adam.slots();
    for (size_t i = 0; i < my_slots.size(); ++i) {
      my_slots[i].second.assign(
          distribute(to_global(their_slots[i].second.value()), my_slots[i].second.layout()));
    }
    adam.set_step(other.adam.step());
    train.restore(other.train.state());
    epoch = other.epoch;
  }
};

void check_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("tensor " << i);
    CHECK(bitwise_equal(a[i], b[i]));
  }
}

}  // namespace

TEST_CASE("training after a restore on the same mesh matches uninterrupted training bit for bit") {
  const Examples e = examples();
  const Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  Run straight(mesh, false, 1, e);
  std::vector<Tensor> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(straight.step());

  const std::string dir = fresh_directory();
  Run first(mesh, false, 1, e);
  for (int i = 0; i < 2; ++i) CHECK(bitwise_equal(first.step(), losses[i]));
  first.checkpoint.save(dir + "/ckpt-2");

  Run resumed(mesh, false, 77, e);  // other initial weights, no slots, step 0: all overwritten
  resumed.checkpoint.restore(dir + "/ckpt-2");
  CHECK(resumed.adam.step() == 2);
  for (int i = 2; i < 4; ++i) CHECK(bitwise_equal(resumed.step(), losses[i]));
  check_same(resumed.state(), straight.state());
  CHECK(resumed.train.state() == straight.train.state());
}

TEST_CASE("training resumed on another mesh matches the same run moved without a checkpoint") {
  const Examples e = examples();
  const Mesh data_parallel = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  const Mesh model_parallel = Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kCPU);
  const std::string dir = fresh_directory();

  Run first(data_parallel, false, 1, e);
  for (int i = 0; i < 3; ++i) first.step();  // into the second epoch (3 batches per epoch)
  first.checkpoint.save(dir + "/ckpt-3");

  Run resumed(model_parallel, true, 5, e);
  resumed.checkpoint.restore(dir + "/ckpt-3");
  Run moved(model_parallel, true, 6, e);
  moved.copy_state_from(first);
  for (int i = 0; i < 2; ++i) CHECK(bitwise_equal(resumed.step(), moved.step()));
  check_same(resumed.state(), moved.state());
  CHECK(resumed.epoch == 1);
}
