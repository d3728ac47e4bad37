// Every way a restore can be refused: the exact error, and nothing tracked changed afterwards.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "dtensor/creation.h"
#include "runtime/crc32c.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint_testing;
using Catch::Message;

namespace {

Mesh mesh_of(std::vector<MeshDim> dims) { return Mesh::create(std::move(dims), DeviceType::kCPU); }

constexpr int64_t kExamples = 20;

data::Dataset make_dataset(const Mesh& mesh, int64_t batch_size) {
  Tensor features = Tensor::zeros({kExamples, 2}, DType::kF32);
  Tensor labels = Tensor::zeros({kExamples}, DType::kI32);
  data::Dataset d(features, labels, mesh, "batch");
  d.batch(batch_size).repeat();
  return d;
}

// A checkpoint of a small model: two variables, Adam (step 3) over both, a dataset at epoch 0
// batch 3 (of 5) and an integer.
std::string write_reference(const std::string& dir) {
  Mesh m4 = mesh_of({{"batch", 4}});
  DVariable kernel(random_uniform({6, 5}, Layout::replicated(m4, 2), 1), "dense/kernel");
  DVariable bias(random_uniform({5}, Layout::batch_sharded(m4, "batch", 1), 2), "dense/bias");
  Adam adam(0.01);
  for (int i = 0; i < 3; ++i) {
    adam.apply({kernel, bias}, {random_uniform({6, 5}, Layout::replicated(m4, 2), 3),
                                random_uniform({5}, Layout::replicated(m4, 1), 4)});
  }
  data::Dataset train = make_dataset(m4, 4);
  for (int i = 0; i < 3; ++i) train.next();
  int64_t epoch = 7;
  Checkpoint c;
  c.add_variable("dense/kernel", kernel);
  c.add_variable("dense/bias", bias);
  c.add_optimizer("adam", adam);
  c.add_dataset("train", train);
  c.add_int("epoch", &epoch);
  const std::string path = dir + "/ckpt-3";
  c.save(path);
  return path;
}

// Fresh objects to restore into (on another mesh), and a record of their state to compare with
// after a failed restore.
struct Tracked {
  Mesh mesh = mesh_of({{"batch", 2}, {"model", 2}});
  DVariable kernel{random_uniform({6, 5}, Layout({"unsharded", "model"}, mesh), 11),
                   "dense/kernel"};
  DVariable bias{random_uniform({5}, Layout::replicated(mesh, 1), 12), "dense/bias"};
  Adam adam{0.01};
  data::Dataset train = make_dataset(mesh, 4);
  int64_t epoch = -1;
  Checkpoint checkpoint;

  Tracked() {
    adam.set_step(42);
    train.next();
  }
  void track_all() {
    checkpoint.add_variable("dense/kernel", kernel);
    checkpoint.add_variable("dense/bias", bias);
    checkpoint.add_optimizer("adam", adam, {kernel, bias});
    checkpoint.add_dataset("train", train);
    checkpoint.add_int("epoch", &epoch);
  }

  struct Snapshot {
    Tensor kernel, bias;
    int64_t step, epoch;
    data::Dataset::State position;
  };
  Snapshot snapshot() const {
    return {to_global(kernel.value()), to_global(bias.value()), adam.step(), epoch, train.state()};
  }
  void check_unchanged(const Snapshot& before) const {
    CHECK(bitwise_equal(to_global(kernel.value()), before.kernel));
    CHECK(bitwise_equal(to_global(bias.value()), before.bias));
    CHECK(adam.step() == before.step);
    CHECK(epoch == before.epoch);
    CHECK(train.state() == before.position);
    for (const auto& [name, slot] : adam.slots()) {
      INFO(name);
      CHECK(bitwise_equal(to_global(slot.value()),
                          Tensor::zeros(slot.shape(), slot.dtype())));  // as built: zeros
    }
  }
};

const std::string kFile = "shards-00000-of-00001.safetensors";

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

// Edits the index of the checkpoint at `path` and re-seals it with a valid index_crc32c, as a
// writer with a bug (or a hostile one) would: only the structural checks can refuse it.
void edit_index(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(read_text(path + "/index.json"));
  j.erase("index_crc32c");
  edit(j);
  const std::string body = j.dump();
  j["index_crc32c"] = checkpoint_internal::crc32c(body.data(), body.size());
  write_text(path + "/index.json", j.dump() + "\n");
}

}  // namespace

TEST_CASE("a good checkpoint restores (the baseline for the failures below)") {
  const std::string path = write_reference(fresh_directory());
  Tracked t;
  t.track_all();
  t.checkpoint.restore(path);
  CHECK(t.adam.step() == 3);
  CHECK(t.epoch == 7);
  CHECK(t.train.state() == data::Dataset::State{0, 3});
}

TEST_CASE("mismatched checkpoints are refused with a clear error and change nothing") {
  const std::string path = write_reference(fresh_directory());

  SECTION("shape") {
    Tracked t;
    DVariable narrow(zeros({6, 4}, Layout::replicated(t.mesh, 2)), "dense/kernel");
    t.checkpoint.add_variable("dense/kernel", narrow);
    auto before = t.snapshot();
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), ShapeError,
                         Message("[Checkpoint::restore] variable 'dense/kernel' in " + path +
                                 " has shape [6,5] but the tracked variable has [6,4]"));
    t.check_unchanged(before);
    CHECK(bitwise_equal(to_global(narrow.value()), Tensor::zeros({6, 4}, DType::kF32)));
  }
  SECTION("dtype") {
    Tracked t;
    DVariable wide(zeros({6, 5}, Layout::replicated(t.mesh, 2), DType::kF64), "dense/kernel");
    t.checkpoint.add_variable("dense/kernel", wide);
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), DTypeError,
                         Message("[Checkpoint::restore] variable 'dense/kernel' in " + path +
                                 " is f32 but the tracked variable is f64"));
  }
  SECTION("missing variable") {
    Tracked t;
    t.track_all();
    DVariable extra(zeros({3}, Layout::replicated(t.mesh, 1)), "head");
    t.checkpoint.add_variable("head/kernel", extra);
    auto before = t.snapshot();
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] variable 'head/kernel' is not in " + path));
    t.check_unchanged(before);
  }
  SECTION("missing slot, optimizer, dataset, integer") {
    Tracked t;
    t.track_all();
    SGD sgd(0.1, 0.9);
    t.checkpoint.add_optimizer("sgd", sgd, {t.kernel});
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] slot 'sgd/dense/kernel/momentum' of "
                                 "optimizer 'sgd' is not in " +
                                 path));
    Tracked u;
    u.track_all();
    SGD plain(0.1);
    u.checkpoint.add_optimizer("plain", plain);
    CHECK_THROWS_MATCHES(u.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] optimizer 'plain' is not in " + path));
    Tracked v;
    v.track_all();
    data::Dataset eval = make_dataset(v.mesh, 5);
    v.checkpoint.add_dataset("eval", eval);
    CHECK_THROWS_MATCHES(v.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] dataset 'eval' is not in " + path));
    Tracked w;
    w.track_all();
    int64_t seed = 0;
    w.checkpoint.add_int("seed", &seed);
    auto before = w.snapshot();
    CHECK_THROWS_MATCHES(w.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] integer 'seed' is not in " + path));
    w.check_unchanged(before);
  }
  SECTION("untracked entries: refused when strict, ignored otherwise") {
    Tracked t;
    t.checkpoint.add_variable("dense/kernel", t.kernel);
    t.checkpoint.add_optimizer("adam", t.adam, {t.kernel});
    t.checkpoint.add_dataset("train", t.train);
    t.checkpoint.add_int("epoch", &t.epoch);
    auto before = t.snapshot();
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(path), InvalidArgumentError,
        Message("[Checkpoint::restore] " + path +
                " holds slot 'adam/dense/bias/m' of optimizer 'adam', which the tracked optimizer "
                "does not have (pass the optimizer's variables to add_optimizer, or track them)"));
    t.check_unchanged(before);

    Tracked u;
    u.checkpoint.add_variable("dense/kernel", u.kernel);
    CHECK_THROWS_MATCHES(u.checkpoint.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] " + path +
                                 " holds optimizer 'adam', which is not tracked "
                                 "(set_strict(false) restores a subset)"));
    u.checkpoint.set_strict(false);
    u.checkpoint.restore(path);
    CHECK(bitwise_equal(
        to_global(u.kernel.value()),
        to_global(load_variable(path, "dense/kernel", Layout::replicated(u.mesh, 2)))));
  }
  SECTION("a dataset that cannot resume the saved position") {
    Tracked t;
    t.track_all();
    data::Dataset coarse = make_dataset(t.mesh, 10);  // 2 batches per epoch; saved at batch 3
    Checkpoint c;
    c.add_variable("dense/kernel", t.kernel);
    c.add_variable("dense/bias", t.bias);
    c.add_optimizer("adam", t.adam, {t.kernel, t.bias});
    c.add_dataset("train", coarse);
    c.add_int("epoch", &t.epoch);
    auto before = t.snapshot();
    CHECK_THROWS_MATCHES(c.restore(path), InvalidArgumentError,
                         Message("[Checkpoint::restore] dataset 'train' in " + path +
                                 " is at (epoch 0, batch 3), which the tracked dataset of 2 "
                                 "batches per epoch cannot resume"));
    t.check_unchanged(before);
    CHECK(coarse.state() == data::Dataset::State{0, 0});
  }
}

TEST_CASE("damaged checkpoints are refused with a clear error and change nothing") {
  const std::string path = write_reference(fresh_directory());
  const std::string file = path + "/" + kFile;
  Tracked t;
  t.track_all();
  auto before = t.snapshot();

  SECTION("a flipped byte in the data") {
    const uint64_t data_start = file_size(file) - (30 + 5 + 30 + 30 + 5 + 5) * 4;
    flip_byte(file, data_start + 17);
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] checksum mismatch in " + file +
                                 ": variable 'dense/kernel' shard dense/kernel@0,0, bytes "
                                 "[0,120) of the shard (block 0 of 1)"));
  }
  SECTION("a flipped byte in the last shard") {
    flip_byte(file, file_size(file) - 1);
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] checksum mismatch in " + file +
                                 ": variable 'adam/dense/bias/v' shard adam/dense/bias/v@4, bytes "
                                 "[0,4) of the shard (block 0 of 1)"));
  }
  SECTION("a flipped byte in the safetensors header") {
    flip_byte(file, 12);
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(path), IoError,
        Message("[Checkpoint::restore] checksum mismatch in the header of " + file));
  }
  SECTION("a flipped byte in the index") {
    // Another hex digit in the save id: still valid JSON, so only the checksum can tell.
    const std::string index = read_text(path + "/index.json");
    const size_t at = index.find("\"save_id\":\"") + 11;
    overwrite_byte(path + "/index.json", at, index[at] == 'a' ? 'b' : 'a');
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(path), IoError,
        Message("[Checkpoint::restore] corrupt index " + path + "/index.json: checksum mismatch"));
  }
  SECTION("a truncated file") {
    const uint64_t size = file_size(file);
    truncate_file(file, size - 10);
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message(fmt::format("[Checkpoint::restore] {} has {} bytes but the index "
                                             "records {} (truncated)",
                                             file, size - 10, size)));
  }
  SECTION("a missing file") {
    REQUIRE(::unlink(file.c_str()) == 0);
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(path), IoError,
        Message("[Checkpoint::restore] cannot open " + file + ": No such file or directory"));
  }
  SECTION("no index") {
    REQUIRE(::unlink((path + "/index.json").c_str()) == 0);
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] " + path +
                                 " is not a complete checkpoint: it has no index.json"));
  }
  SECTION("no checkpoint at all") {
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(path + "-missing"), IoError,
        Message("[Checkpoint::restore] no checkpoint at " + path + "-missing: no such directory"));
  }
  t.check_unchanged(before);
}

TEST_CASE("an index naming a shard file outside the checkpoint directory is refused") {
  for (const char* form : {"../other/", "<dir>/other/", "sub/", "..", "a\\b"}) {
    const std::string dir = fresh_directory();
    const std::string copy = write_reference(dir);
    // A readable copy where the hostile name points, so that only the name check can refuse it.
    REQUIRE(::mkdir((dir + "/other").c_str(), 0755) == 0);
    write_text(dir + "/other/" + kFile, read_text(copy + "/" + kFile));
    std::string name = form;
    if (name == "<dir>/other/") name = dir + "/other/";
    if (name.back() == '/') name += kFile;
    INFO(name);
    edit_index(copy, [&](nlohmann::json& j) { j["files"][0]["name"] = name; });
    Tracked t;
    t.track_all();
    auto before = t.snapshot();
    CHECK_THROWS_MATCHES(
        t.checkpoint.restore(copy), IoError,
        Message("[Checkpoint::restore] corrupt index " + copy + "/index.json: file #0 is named '" +
                name + "', which is not a file name inside the checkpoint directory"));
    t.check_unchanged(before);
    CHECK_FALSE(is_complete_checkpoint(copy));
  }
}

TEST_CASE("an index with a negative optimizer step is refused") {
  const std::string path = write_reference(fresh_directory());
  edit_index(path, [](nlohmann::json& j) { j["optimizers"]["adam"]["step"] = -1; });
  Tracked t;
  t.track_all();
  auto before = t.snapshot();
  CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                       Message("[Checkpoint::restore] corrupt index " + path +
                               "/index.json: optimizer 'adam' step must be an integer in [0, "
                               "9223372036854775807], not -1"));
  t.check_unchanged(before);
}

TEST_CASE("index numbers out of their type's range are refused, naming the key") {
  const std::string path = write_reference(fresh_directory());
  const std::string index = path + "/index.json";
  Tracked t;
  t.track_all();
  auto before = t.snapshot();
  SECTION("a version of 1e300") {
    write_text(index, R"({"format":"dtensor-checkpoint","version":1e300})");
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] corrupt index " + index +
                                 ": version must be an integer in [-9223372036854775808, "
                                 "9223372036854775807], not 1e+300"));
  }
  SECTION("a negative checksum") {
    edit_index(path, [](nlohmann::json& j) { j["files"][0]["header_crc32c"] = -1; });
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] corrupt index " + index +
                                 ": header_crc32c must be an integer in [0, 4294967295], not -1"));
  }
  SECTION("a fractional integer") {
    edit_index(path, [](nlohmann::json& j) { j["ints"]["epoch"] = 7.5; });
    CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                         Message("[Checkpoint::restore] corrupt index " + index +
                                 ": integer 'epoch' must be an integer in [-9223372036854775808, "
                                 "9223372036854775807], not 7.5"));
  }
  t.check_unchanged(before);
  CHECK_FALSE(is_complete_checkpoint(path));
}

TEST_CASE("a deeply nested index is refused without exhausting the stack") {
  const std::string path = write_reference(fresh_directory());
  const std::string index = path + "/index.json";
  const std::string prefix = R"({"format":"dtensor-checkpoint","version":1,"x":)";
  const size_t depth = 1000000;
  write_text(index, prefix + std::string(depth, '[') + std::string(depth, ']') + "}");
  CHECK_FALSE(is_complete_checkpoint(path));
  Tracked t;
  t.track_all();
  auto before = t.snapshot();
  CHECK_THROWS_MATCHES(t.checkpoint.restore(path), IoError,
                       Message(fmt::format("[Checkpoint::restore] corrupt index {}: JSON nests "
                                           "deeper than 32 levels (at byte {})",
                                           index, prefix.size() + 31)));
  t.check_unchanged(before);
}

TEST_CASE("a variable claiming terabytes is refused before anything is allocated") {
  const std::string path = write_reference(fresh_directory());
  const std::string file = path + "/" + kFile;
  const uint64_t claimed = uint64_t{4} << 40;  // 4 TiB of f32: [2^20, 2^20]
  const int64_t side = int64_t{1} << 20;
  uint64_t data_bytes = 0;
  edit_index(path, [&](nlohmann::json& j) {
    // One checksum block for any shard, so that the index stays small.
    j["checksum_block_bytes"] = uint64_t{1} << 44;
    data_bytes =
        j["files"][0]["size"].get<uint64_t>() - j["files"][0]["data_start"].get<uint64_t>();
    nlohmann::json& kernel = j["variables"]["dense/kernel"];
    kernel["shape"] = {side, side};
    kernel["shards"][0]["shape"] = {side, side};
    kernel["shards"][0]["data_offsets"] = {0, claimed};
  });
  const Layout layout = Layout::replicated(mesh_of({{"batch", 2}}), 2);
  SECTION("bytes past the file's data") {
    CHECK_THROWS_MATCHES(
        load_variable(path, "dense/kernel", layout), IoError,
        Message(fmt::format("[load_variable] corrupt index {}/index.json: variable "
                            "'dense/kernel' shard dense/kernel@0,0 spans bytes [0,{}) of the data "
                            "of {}, which has {}",
                            path, claimed, kFile, data_bytes)));
  }
  SECTION("a file size the file does not have") {
    const uint64_t size = file_size(file);
    edit_index(path, [&](nlohmann::json& j) { j["files"][0]["size"] = size + claimed; });
    CHECK_THROWS_MATCHES(load_variable(path, "dense/kernel", layout), IoError,
                         Message(fmt::format("[load_variable] {} has {} bytes but the index "
                                             "records {} (truncated)",
                                             file, size, size + claimed)));
  }
}
