#include "train/checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dtensor/creation.h"
#include "runtime/block.h"
#include "runtime/crc32c.h"
#include "train/checkpoint/test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint_testing;
using Catch::Message;

namespace {

Mesh mesh_of(std::vector<MeshDim> dims) { return Mesh::create(std::move(dims), DeviceType::kCPU); }

// The meshes of the round-trip matrix: different device counts, one and two dims, uneven splits.
std::vector<Mesh> matrix_meshes() {
  return {mesh_of({{"batch", 8}}), mesh_of({{"batch", 4}}), mesh_of({{"batch", 3}, {"model", 2}}),
          mesh_of({{"batch", 2}, {"model", 4}}), mesh_of({{"batch", 1}})};
}

std::string describe(const Layout& layout) {
  return layout.mesh().dims_string() + " " + layout.short_string();
}

// Local devices that hold the same box share one buffer, others do not.
void check_replicas_share_buffers(const DTensor& t) {
  const Mesh& mesh = t.mesh();
  const auto& local = mesh.local_device_ids();
  for (size_t i = 0; i < local.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const bool same_box = t.layout().shard_offset(t.shape(), local[i]) ==
                                t.layout().shard_offset(t.shape(), local[j]) &&
                            t.layout().shard_shape(t.shape(), local[i]) ==
                                t.layout().shard_shape(t.shape(), local[j]);
      if (t.shard(i).num_elements() > 0) {
        CHECK(t.shard(i).shares_storage_with(t.shard(j)) == same_box);
      }
    }
  }
}

// Saves `global` from every layout in `layouts` and restores each save into every layout.
void check_round_trips(const Tensor& global, const std::vector<Layout>& layouts) {
  const std::string dir = fresh_directory();
  std::vector<std::string> paths;
  for (size_t i = 0; i < layouts.size(); ++i) {
    DVariable v(distribute(global, layouts[i]), "w");
    Checkpoint c;
    c.add_variable("w", v);
    paths.push_back(dir + "/from-" + std::to_string(i));
    c.save(paths.back());
  }
  for (size_t i = 0; i < layouts.size(); ++i) {
    for (const Layout& target_layout : layouts) {
      DVariable target(zeros(global.shape(), target_layout, global.dtype()), "w");
      Checkpoint c;
      c.add_variable("w", target);
      c.restore(paths[i]);
      INFO("saved from " << describe(layouts[i]) << ", restored into " << describe(target_layout));
      REQUIRE(target.value().layout() == target_layout);
      REQUIRE(bitwise_equal(to_global(target.value()), global));
      check_replicas_share_buffers(target.value());
    }
  }
}

std::vector<Layout> all_matrix_layouts(int64_t rank) {
  std::vector<Layout> out;
  for (const Mesh& mesh : matrix_meshes()) {
    for (const Layout& l : layouts_of(mesh, rank)) out.push_back(l);
  }
  return out;
}

nlohmann::json read_index(const std::string& path) {
  return nlohmann::json::parse(read_text(path + "/index.json"));
}

}  // namespace

TEST_CASE("round trips are bit-identical across meshes and layouts, uneven dims included") {
  SECTION("[13,7] over every layout of batch=8, 4, 3x2, 2x4 and 1") {
    check_round_trips(random_bits({13, 7}, DType::kF32, 1), all_matrix_layouts(2));
  }
  SECTION("[9]") { check_round_trips(random_bits({9}, DType::kF32, 2), all_matrix_layouts(1)); }
  SECTION("[5,1,6] and scalars") {
    std::vector<Layout> rank3;
    for (const Mesh& m : {mesh_of({{"batch", 2}, {"model", 4}}), mesh_of({{"batch", 3}})}) {
      for (const Layout& l : layouts_of(m, 3)) rank3.push_back(l);
    }
    check_round_trips(random_bits({5, 1, 6}, DType::kF64, 3), rank3);
    check_round_trips(random_bits({}, DType::kF32, 4),
                      {Layout::replicated(mesh_of({{"batch", 8}}), 0),
                       Layout::replicated(mesh_of({{"batch", 1}}), 0)});
  }
  SECTION("empty tensors") {
    check_round_trips(random_bits({0, 4}, DType::kF32, 5), all_matrix_layouts(2));
  }
}

TEST_CASE("every dtype round trips bit for bit") {
  const std::string dir = fresh_directory();
  const Layout from({"batch", "model"}, mesh_of({{"batch", 2}, {"model", 4}}));
  const Layout to({"unsharded", "batch"}, mesh_of({{"batch", 3}}));
  for (DType dtype :
       {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    INFO(dtype_name(dtype));
    Tensor global = random_bits({5, 9}, dtype, 10 + static_cast<uint64_t>(dtype));
    DVariable v(distribute(global, from), "v");
    Checkpoint save;
    save.add_variable("v", v);
    const std::string path = dir + "/" + std::string(dtype_name(dtype));
    save.save(path);
    DVariable target(zeros({5, 9}, to, dtype), "v");
    Checkpoint restore;
    restore.add_variable("v", target);
    restore.restore(path);
    CHECK(bitwise_equal(to_global(target.value()), global));
    CHECK(bitwise_equal(to_global(load_variable(path, "v", to)), global));
  }
}

TEST_CASE("batch=8 -> batch=2,model=4 (column-sharded) -> batch=1") {
  const std::string dir = fresh_directory();
  Tensor kernel = random_bits({100, 60}, DType::kF32, 21);
  Tensor bias = random_bits({60}, DType::kF32, 22);
  Tensor table = random_bits({37, 6}, DType::kF32, 23);
  Mesh m8 = mesh_of({{"batch", 8}});
  DVariable k8(distribute(kernel, Layout::replicated(m8, 2)), "kernel");
  DVariable b8(distribute(bias, Layout::replicated(m8, 1)), "bias");
  DVariable t8(distribute(table, Layout::batch_sharded(m8, "batch", 2)), "table");
  Checkpoint c8;
  c8.add_variables("model", {k8, b8, t8});
  c8.save(dir + "/a");

  Mesh m24 = mesh_of({{"batch", 2}, {"model", 4}});
  DVariable k24(zeros({100, 60}, Layout::inner_sharded(m24, "model", 2)), "kernel");
  DVariable b24(zeros({60}, Layout::inner_sharded(m24, "model", 1)), "bias");
  DVariable t24(zeros({37, 6}, Layout({"model", "batch"}, m24)), "table");
  Checkpoint c24;
  c24.add_variables("model", {k24, b24, t24});
  c24.restore(dir + "/a");
  CHECK(bitwise_equal(to_global(k24.value()), kernel));
  CHECK(bitwise_equal(to_global(b24.value()), bias));
  CHECK(bitwise_equal(to_global(t24.value()), table));
  c24.save(dir + "/b");

  Mesh m1 = mesh_of({{"batch", 1}});
  DVariable k1(zeros({100, 60}, Layout::replicated(m1, 2)), "kernel");
  DVariable b1(zeros({60}, Layout::replicated(m1, 1)), "bias");
  DVariable t1(zeros({37, 6}, Layout::replicated(m1, 2)), "table");
  Checkpoint c1;
  c1.add_variables("model", {k1, b1, t1});
  c1.restore(dir + "/b");
  CHECK(bitwise_equal(k1.value().shard(0), kernel));
  CHECK(bitwise_equal(b1.value().shard(0), bias));
  CHECK(bitwise_equal(t1.value().shard(0), table));
}

TEST_CASE("each distinct shard is written once, by the lowest device holding it") {
  const std::string dir = fresh_directory();
  Tensor global = random_bits({13, 7}, DType::kF32, 31);
  Mesh m24 = mesh_of({{"batch", 2}, {"model", 4}});
  Mesh m8 = mesh_of({{"batch", 8}});
  DVariable cols(distribute(global, Layout::inner_sharded(m24, "model", 2)), "cols");
  DVariable rep(distribute(global, Layout::replicated(m8, 2)), "rep");
  DVariable rows(distribute(global, Layout::batch_sharded(m8, "batch", 2)), "rows");
  Checkpoint c;
  c.add_variable("cols", cols);
  c.add_variable("rep", rep);
  c.add_variable("rows", rows);
  const std::string path = dir + "/c";
  c.save(path);

  nlohmann::json index = read_index(path);
  auto keys = [&](const std::string& name) {
    std::vector<std::string> out;
    for (const auto& s : index["variables"][name]["shards"]) out.push_back(s["key"]);
    return out;
  };
  // model=4 splits 7 columns as 2,2,2,1; batch=8 splits 13 rows as 2,2,2,2,2,2,1,0.
  CHECK(keys("cols") == std::vector<std::string>{"cols@0,0", "cols@0,2", "cols@0,4", "cols@0,6"});
  CHECK(keys("rep") == std::vector<std::string>{"rep@0,0"});
  CHECK(keys("rows") == std::vector<std::string>{"rows@0,0", "rows@2,0", "rows@4,0", "rows@6,0",
                                                 "rows@8,0", "rows@10,0", "rows@12,0"});
  CHECK(index["variables"]["rows"]["shards"][6]["shape"] == nlohmann::json({1, 7}));
  CHECK(index["variables"]["cols"]["dtype"] == "F32");
  CHECK(index["variables"]["cols"]["shape"] == nlohmann::json({13, 7}));

  // The safetensors file, read the way any reader would: header length, JSON, packed data.
  REQUIRE(index["files"].size() == 1);
  const std::string file = path + "/" + index["files"][0]["name"].get<std::string>();
  CHECK(index["files"][0]["name"] == "shards-00000-of-00001.safetensors");
  const std::string bytes = read_text(file);
  CHECK(bytes.size() == index["files"][0]["size"].get<uint64_t>());
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) {
    header_length |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  }
  const uint64_t data_start = 8 + header_length;
  CHECK(data_start % 64 == 0);
  CHECK(data_start == index["files"][0]["data_start"].get<uint64_t>());
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_length));
  CHECK(header["__metadata__"]["format"] == "dtensor-checkpoint");
  CHECK(header.size() == 1 + 4 + 1 + 7);
  uint64_t packed = 0;
  for (const char* name : {"cols", "rep", "rows"}) {
    for (const auto& shard : index["variables"][name]["shards"]) {
      const auto& entry = header[shard["key"].get<std::string>()];
      CHECK(entry["dtype"] == "F32");
      CHECK(entry["shape"] == shard["shape"]);
      CHECK(entry["data_offsets"] == shard["data_offsets"]);
      const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
      CHECK(begin == packed);
      packed = end;
      Tensor expected = slice_box(global, shard["offset"].get<std::vector<int64_t>>(),
                                  shard["shape"].get<Shape>());
      CHECK(bytes.compare(data_start + begin, end - begin,
                          static_cast<const char*>(expected.raw_data()), expected.nbytes()) == 0);
    }
  }
  CHECK(data_start + packed == bytes.size());
  using checkpoint_internal::crc32c;
  CHECK(crc32c(bytes.data(), data_start) == index["files"][0]["header_crc32c"].get<uint32_t>());
  CHECK(crc32c(bytes.data() + data_start, packed) ==
        index["files"][0]["data_crc32c"].get<uint32_t>());
}

TEST_CASE("optimizer slots and step round trip into a fresh optimizer on another mesh") {
  const std::string dir = fresh_directory();
  Mesh m8 = mesh_of({{"batch", 8}});
  DVariable w(random_uniform({6, 4}, Layout::replicated(m8, 2), 1), "w");
  DVariable b(random_uniform({4}, Layout::batch_sharded(m8, "batch", 1), 2), "b");
  Adam adam(0.1);
  for (int step = 0; step < 2; ++step) {
    adam.apply({w, b}, {random_uniform({6, 4}, Layout::replicated(m8, 2), 10 + step),
                        random_uniform({4}, Layout::replicated(m8, 1), 20 + step)});
  }
  Checkpoint c;
  c.add_variables("model", {w, b});
  c.add_optimizer("adam", adam);
  c.save(dir + "/c");
  CHECK(read_index(dir + "/c")["optimizers"]["adam"]["slots"] ==
        nlohmann::json({"adam/w/m", "adam/w/v", "adam/b/m", "adam/b/v"}));

  std::map<std::string, Tensor> saved_slots;
  for (const auto& [name, slot] : adam.slots()) saved_slots[name] = to_global(slot.value());

  Mesh m24 = mesh_of({{"batch", 2}, {"model", 4}});
  auto check_fresh = [&](bool pass_vars) {
    DVariable w2(zeros({6, 4}, Layout::inner_sharded(m24, "model", 2)), "w");
    DVariable b2(zeros({4}, Layout::batch_sharded(m24, "model", 1)), "b");
    Adam adam2(0.1);
    Checkpoint c2;
    c2.add_variables("model", {w2, b2});
    if (pass_vars) {
      c2.add_optimizer("adam", adam2, {w2, b2});
    } else {
      c2.add_optimizer("adam", adam2);
    }
    c2.restore(dir + "/c");
    CHECK(adam2.step() == 2);
    REQUIRE(adam2.slots().size() == 4);
    for (const auto& [name, slot] : adam2.slots()) {
      INFO(name);
      CHECK(slot.layout() == (name[0] == 'w' ? w2.layout() : b2.layout()));
      CHECK(bitwise_equal(to_global(slot.value()), saved_slots.at(name)));
    }
    CHECK(bitwise_equal(to_global(w2.value()), to_global(w.value())));
  };
  SECTION("variables given") { check_fresh(true); }
  SECTION("variables inferred from the tracked ones") { check_fresh(false); }
}

TEST_CASE("dataset position and integers round trip") {
  const std::string dir = fresh_directory();
  const int64_t n = 22;
  Tensor features = random_bits({n, 3}, DType::kF32, 40);
  Tensor labels = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i);
  data::Dataset train(features, labels, mesh_of({{"batch", 4}}), "batch");
  train.shuffle(7).batch(4).repeat();
  for (int i = 0; i < 8; ++i) train.next();  // 6 batches per epoch: now at epoch 1, batch 2
  int64_t epoch = 1, rng_counter = -12345678901;
  Checkpoint c;
  c.add_dataset("train", train);
  c.add_int("epoch", &epoch);
  c.add_int("rng", &rng_counter);
  c.save(dir + "/c");
  std::optional<data::Batch> expected = train.next();

  data::Dataset resumed(features, labels, mesh_of({{"batch", 2}, {"model", 2}}), "batch");
  resumed.shuffle(7).batch(4).repeat().prefetch(2);
  int64_t epoch2 = 0, rng2 = 0;
  Checkpoint c2;
  c2.add_dataset("train", resumed);
  c2.add_int("epoch", &epoch2);
  c2.add_int("rng", &rng2);
  c2.restore(dir + "/c");
  CHECK(resumed.state() == data::Dataset::State{1, 2});
  CHECK(epoch2 == 1);
  CHECK(rng2 == -12345678901);
  std::optional<data::Batch> got = resumed.next();
  REQUIRE(got);
  CHECK(got->epoch == expected->epoch);
  CHECK(got->index == expected->index);
  CHECK(bitwise_equal(to_global(got->labels), to_global(expected->labels)));
  CHECK(bitwise_equal(to_global(got->features), to_global(expected->features)));
}

TEST_CASE("saving over an existing checkpoint replaces it and leaves nothing behind") {
  const std::string dir = fresh_directory();
  Mesh m4 = mesh_of({{"batch", 4}});
  DVariable v(random_uniform({10, 3}, Layout::batch_sharded(m4, "batch", 2), 1), "v");
  int64_t counter = 1;
  Checkpoint c;
  c.add_variable("v", v);
  c.add_int("counter", &counter);
  c.save(dir + "/c");
  v.assign(random_uniform({10, 3}, Layout::replicated(m4, 2), 2));
  Tensor second = to_global(v.value());
  counter = 2;
  c.save(dir + "/c/");  // a trailing slash names the same directory
  CHECK(list_names(dir) == std::vector<std::string>{"c"});
  v.assign(zeros({10, 3}, Layout::replicated(m4, 2)));
  counter = 0;
  c.restore(dir + "/c");
  CHECK(bitwise_equal(to_global(v.value()), second));
  CHECK(counter == 2);
  CHECK(list_names(dir + "/c") == std::vector<std::string>{"index.json",
                                                           "shards-00000-of-00001.json",
                                                           "shards-00000-of-00001.safetensors"});
}

TEST_CASE("tracking rejects bad names") {
  Mesh m = mesh_of({{"batch", 2}});
  DVariable v(zeros({2}, Layout::replicated(m, 1)), "v");
  Checkpoint c;
  c.add_variable("v", v);
  CHECK_THROWS_MATCHES(c.add_variable("v", v), InvalidArgumentError,
                       Message("[Checkpoint::add_variable] variable 'v' is already tracked"));
  CHECK_THROWS_MATCHES(c.add_variable("", v), InvalidArgumentError,
                       Message("[Checkpoint::add_variable] variable names must not be empty"));
  CHECK_THROWS_MATCHES(c.add_int("n", nullptr), InvalidArgumentError,
                       Message("[Checkpoint::add_int] integer 'n' is a null pointer"));
  // A slot name colliding with a variable name is caught when saving.
  SGD sgd(0.1, 0.9);
  DVariable w(zeros({2}, Layout::replicated(m, 1)), "w");
  sgd.build({w});
  c.add_variable("sgd/w/momentum", w);
  c.add_optimizer("sgd", sgd);
  CHECK_THROWS_MATCHES(c.save(fresh_directory() + "/c"), InvalidArgumentError,
                       Message("[Checkpoint::save] name 'sgd/w/momentum' is used by variable "
                               "'sgd/w/momentum' and by a slot of optimizer 'sgd'"));
}

TEST_CASE("Optimizer::build creates the slots apply would create, once") {
  Mesh m = mesh_of({{"batch", 4}});
  DVariable w(random_uniform({5, 3}, Layout::batch_sharded(m, "batch", 2), 1), "w");
  DVariable b(zeros({3}, Layout::replicated(m, 1)), "b");
  Adam built(0.1), lazy(0.1);
  built.build({w});
  built.build({w, b});  // w keeps its slots
  REQUIRE(built.slots().size() == 4);
  CHECK(built.slots()[0].first == "w/m");
  CHECK(built.slots()[0].second.layout() == w.layout());
  CHECK(built.step() == 0);
  const int64_t m_id = built.slots()[0].second.id();
  built.build({w});
  CHECK(built.slots()[0].second.id() == m_id);

  // Applying after build gives what applying without it gives.
  DVariable w2(random_uniform({5, 3}, Layout::batch_sharded(m, "batch", 2), 1), "w");
  DVariable b2(zeros({3}, Layout::replicated(m, 1)), "b");
  auto grads = [&] {
    return std::vector<DTensor>{random_uniform({5, 3}, Layout::replicated(m, 2), 7),
                                random_uniform({3}, Layout::replicated(m, 1), 8)};
  };
  built.apply({w, b}, grads());
  lazy.apply({w2, b2}, grads());
  CHECK(built.slots()[0].second.id() == m_id);
  CHECK(bitwise_equal(to_global(w.value()), to_global(w2.value())));
  for (size_t i = 0; i < 4; ++i) {
    CHECK(bitwise_equal(to_global(built.slots()[i].second.value()),
                        to_global(lazy.slots()[i].second.value())));
  }
  DVariable ints(zeros({2}, Layout::replicated(m, 1), DType::kI32), "counts");
  CHECK_THROWS_MATCHES(
      built.build({ints}), DTypeError,
      Message("[Adam::build] variable 'counts' is i32; f32 and f64 are supported"));
}

TEST_CASE("saving never replaces something that is not a checkpoint") {
  const std::string dir = fresh_directory();
  Mesh m = mesh_of({{"batch", 2}});
  DVariable v(zeros({2}, Layout::replicated(m, 1)), "v");
  Checkpoint c;
  c.add_variable("v", v);
  const std::string data = dir + "/data";
  REQUIRE(::mkdir(data.c_str(), 0755) == 0);
  { std::ofstream(data + "/precious.txt") << "keep me"; }
  CHECK_THROWS_MATCHES(
      c.save(data), InvalidArgumentError,
      Message("[Checkpoint::save] " + data + " exists and is not a checkpoint; not replacing it"));
  CHECK(read_text(data + "/precious.txt") == "keep me");
  CHECK(list_names(dir) == std::vector<std::string>{"data"});
  { std::ofstream(dir + "/file") << "x"; }
  CHECK_THROWS_AS(c.save(dir + "/file"), InvalidArgumentError);
  REQUIRE(::mkdir((dir + "/empty").c_str(), 0755) == 0);
  c.save(dir + "/empty");
  CHECK(is_complete_checkpoint(dir + "/empty"));
}
