#include <catch2/catch.hpp>
#include <filesystem>

#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint_testing;
using Catch::Message;

namespace {

struct Model {
  Mesh mesh = Mesh::create({{"batch", 4}}, DeviceType::kCPU);
  DVariable v{zeros({9, 3}, Layout::batch_sharded(mesh, "batch", 2)), "v"};
  int64_t step = -1;
  Checkpoint checkpoint;
  Model() {
    checkpoint.add_variable("v", v);
    checkpoint.add_int("step", &step);
  }
  // Values that tell the step they were saved at.
  void set(int64_t s) {
    v.assign(fill({9, 3}, Layout::replicated(mesh, 2), static_cast<double>(s)));
    step = s;
  }
  bool holds(int64_t s) const {
    return step == s &&
           bitwise_equal(to_global(v.value()), to_global(fill({9, 3}, Layout::replicated(mesh, 2),
                                                              static_cast<double>(s))));
  }
};

std::vector<std::string> ckpts(const std::string& dir, std::vector<int> steps) {
  std::vector<std::string> out;
  for (int s : steps) out.push_back(dir + "/ckpt-" + std::to_string(s));
  return out;
}

}  // namespace

TEST_CASE("CheckpointManager keeps the last K and restores the latest") {
  const std::string dir = fresh_directory() + "/run";
  Model m;
  CheckpointManager manager(m.checkpoint, dir, 3);
  CHECK_FALSE(manager.latest());
  CHECK_FALSE(manager.restore_latest());
  for (int s = 1; s <= 6; ++s) {
    m.set(s);
    CHECK(manager.save(s) == dir + "/ckpt-" + std::to_string(s));
  }
  CHECK(manager.checkpoints() == ckpts(dir, {4, 5, 6}));
  CHECK(list_names(dir) == std::vector<std::string>{"ckpt-4", "ckpt-5", "ckpt-6"});
  CHECK(manager.latest() == dir + "/ckpt-6");

  Model fresh;
  CheckpointManager reader(fresh.checkpoint, dir, 3);
  CHECK(reader.restore_latest() == 6);
  CHECK(fresh.holds(6));

  // Saving a step again replaces it.
  m.set(60);
  manager.save(6);
  CHECK(manager.checkpoints() == ckpts(dir, {4, 5, 6}));
  CHECK(reader.restore_latest() == 6);
  CHECK(fresh.holds(60));
  CHECK(checkpoint_step(dir + "/ckpt-6") == 6);
  CHECK_FALSE(checkpoint_step(dir + "/ckpt-06"));
}

TEST_CASE("latest() never picks an incomplete checkpoint, and saves clear leftovers") {
  namespace fs = std::filesystem;
  const std::string dir = fresh_directory();
  Model m;
  CheckpointManager manager(m.checkpoint, dir, 2);
  m.set(5);
  manager.save(5);
  const std::string good = dir + "/ckpt-5";
  auto copy = [&](const std::string& name) {
    fs::copy(good, dir + "/" + name, fs::copy_options::recursive);
    return dir + "/" + name;
  };
  fs::create_directory(dir + "/ckpt-9");          // no index: an interrupted rename?
  copy("ckpt-10.tmp-0123456789abcdef");           // a staging directory
  const std::string truncated = copy("ckpt-11");  // a file cut short
  truncate_file(truncated + "/shards-00000-of-00001.safetensors", 100);
  const std::string corrupt = copy("ckpt-12");  // a damaged index
  flip_byte(corrupt + "/index.json", 30);
  const std::string missing = copy("ckpt-13");  // a file gone
  fs::remove(missing + "/shards-00000-of-00001.safetensors");
  copy("ckpt-014");  // not a step name
  copy("ckpt-15x");

  CHECK(manager.latest() == good);
  CHECK(manager.checkpoints() == std::vector<std::string>{good});
  CHECK_FALSE(is_complete_checkpoint(dir + "/ckpt-9"));
  CHECK(is_complete_checkpoint(dir + "/ckpt-10.tmp-0123456789abcdef"));

  m.set(6);
  manager.save(6);
  CHECK(manager.latest() == dir + "/ckpt-6");
  CHECK(list_names(dir) == std::vector<std::string>{"ckpt-014", "ckpt-11", "ckpt-12", "ckpt-13",
                                                    "ckpt-15x", "ckpt-5", "ckpt-6", "ckpt-9"});
}

TEST_CASE("CheckpointManager rejects bad arguments") {
  Model m;
  const std::string dir = fresh_directory();
  CHECK_THROWS_MATCHES(CheckpointManager(m.checkpoint, dir, 0), InvalidArgumentError,
                       Message("[CheckpointManager] max_to_keep must be >= 1, got 0"));
  CheckpointManager manager(m.checkpoint, dir, 1);
  CHECK_THROWS_MATCHES(manager.save(-1), InvalidArgumentError,
                       Message("[CheckpointManager::save] step must be >= 0, got -1"));
}
