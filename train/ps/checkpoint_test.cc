// Checkpoints of partitioned variables restore into another partitioning over another number of
// servers, into a synchronous (MirroredStrategy) model, and a synchronous model's checkpoint
// restores into a parameter-server job.
#include "train/ps/checkpoint.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"
#include "train/ps/coordinator.h"
#include "train/ps/local_cluster.h"

using namespace dtensor;
using namespace dtensor::ps;
using testing::LocalCluster;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

Tensor arange(const Shape& shape, float scale) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = scale * static_cast<float>(i);
  return t;
}

StrategyOptions adam_options(Partitioner partitioner) {
  StrategyOptions o;
  o.partitioner = std::move(partitioner);
  o.optimizer = "adam";
  o.learning_rate = 0.1;
  return o;
}

// A gradient of (index + 1) / 10 for every element of every variable.
FunctionRegistry registry() {
  FunctionRegistry r;
  r.add_function("step", [](WorkerContext& c, const std::string&) {
    std::map<std::string, Tensor> grads;
    for (const auto& [name, v] : c.pull()) grads.emplace(name, arange(v.shape(), 0.1f));
    c.push(grads);
    return std::string();
  });
  return r;
}

std::string fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / ("ps_checkpoint_test_" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("partitioned checkpoints restore into any partitioning, a synchronous mesh, and back") {
  const FunctionRegistry functions = registry();
  const std::string dir = fresh_dir("roundtrip");

  // Job A: 2 servers, 3 shards per variable; three asynchronous Adam steps, then a checkpoint.
  LocalCluster cluster_a(1, 2, functions);
  ParameterServerStrategy a(cluster_a.spec(), adam_options(fixed_shards_partitioner(3)));
  a.create_sharded_variable(arange({7, 3}, 1), "dense/kernel");
  a.create_sharded_variable(arange({3}, -1), "dense/bias");
  {
    ClusterCoordinator coordinator(a);
    for (int i = 0; i < 3; ++i) coordinator.schedule("step");
    coordinator.join();
  }
  CHECK(save_checkpoint(a, dir, 3) == dir + "/ckpt-3");
  int64_t step_a = 0;
  const std::map<std::string, Tensor> saved = a.read_variables(/*with_slots=*/true, &step_a);
  CHECK(step_a == 3);
  REQUIRE(saved.count("dense/kernel/m") == 1);
  REQUIRE(saved.count("dense/bias/v") == 1);

  SECTION("into one server, unpartitioned") {
    LocalCluster cluster_b(1, 1, functions);
    ParameterServerStrategy b(cluster_b.spec(), adam_options({}));
    b.create_sharded_variable(Tensor::zeros({7, 3}, DType::kF32), "dense/kernel");
    b.create_sharded_variable(Tensor::zeros({3}, DType::kF32), "dense/bias");
    CHECK(restore_latest(b, dir) == 3);
    int64_t step_b = 0;
    const std::map<std::string, Tensor> restored = b.read_variables(true, &step_b);
    CHECK(step_b == 3);
    REQUIRE(restored.size() == saved.size());
    for (const auto& [name, value] : saved) CHECK(same_bits(restored.at(name), value));
  }

  SECTION("into a synchronous model, and from it back into the job") {
    const Mesh mesh = Mesh::create({{"replica", 2}}, DeviceType::kCPU);
    DVariable kernel(zeros({7, 3}, Layout::replicated(mesh, 2)), "dense/kernel");
    DVariable bias(zeros({3}, Layout::replicated(mesh, 1)), "dense/bias");
    Adam adam(0.1);
    Checkpoint checkpoint;
    checkpoint.add_variable("dense/kernel", kernel);
    checkpoint.add_variable("dense/bias", bias);
    checkpoint.add_optimizer("optimizer", adam, {kernel, bias});
    CheckpointManager manager(checkpoint, dir, 3);
    CHECK(manager.restore_latest() == 3);
    CHECK(adam.step() == 3);
    CHECK(same_bits(to_global(kernel.value()), saved.at("dense/kernel")));
    CHECK(same_bits(to_global(bias.value()), saved.at("dense/bias")));
    for (const auto& [name, slot] : adam.slots()) {
      CHECK(same_bits(to_global(slot.value()), saved.at(name)));
    }

    kernel.assign(distribute(arange({7, 3}, 2), kernel.layout()));
    manager.save(7);
    CHECK(restore_latest(a, dir) == 7);
    int64_t step = 0;
    const std::map<std::string, Tensor> back = a.read_variables(true, &step);
    CHECK(step == 3);
    CHECK(same_bits(back.at("dense/kernel"), arange({7, 3}, 2)));
    CHECK(same_bits(back.at("dense/kernel/v"), saved.at("dense/kernel/v")));
  }
}
