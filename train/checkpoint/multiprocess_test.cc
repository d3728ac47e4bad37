// Saves and restores spanning several processes, emulated in one: each "process" is a thread
// with its own meshes (Mesh::create with process_index/num_processes), its own DTensors holding
// only its devices' shards and its own Checkpoint, and the collectives between them go through a
// backend that meets the threads at every call (runtime/threaded_processes_backend.h). This runs
// the multi-process code paths (one file per process, process 0 merging and committing, agreement
// on failure) without MPI.
#include <catch2/catch.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "runtime/block.h"
#include "runtime/threaded_processes_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/test_util.h"

using namespace dtensor;
using namespace dtensor::checkpoint_testing;

namespace {

// Runs body(process) on `n` threads over the emulating backend (composed with the in-process one,
// as MPI is); returns each one's error ("" if none). The default backends are back afterwards.
std::vector<std::string> run_processes(int n, const std::function<void(int)>& body) {
  register_collective_backends(DeviceType::kCPU, make_in_process_backend(),
                               make_threaded_processes_backend());
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int p = 0; p < n; ++p) {
    threads.emplace_back([&, p] {
      try {
        body(p);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(p)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  reset_collective_backends();
  return errors;
}

struct Globals {
  Tensor rep = random_bits({13, 7}, DType::kF32, 1);
  Tensor rows = random_bits({13, 7}, DType::kF64, 2);
  Tensor cols = random_bits({5, 11}, DType::kI32, 3);
};

// The variables of one process: `rep` replicated and `rows` row-sharded on {batch=4}, `cols`
// column-sharded on {batch=2, model=2}.
struct Saved {
  Mesh line, grid;
  DVariable rep, rows, cols;
  Saved(const Globals& g, int process, int processes)
      : line(Mesh::create({{"batch", 4}}, DeviceType::kCPU, process, processes)),
        grid(Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kCPU, process, processes)),
        rep(distribute(g.rep, Layout::replicated(line, 2)), "rep"),
        rows(distribute(g.rows, Layout::batch_sharded(line, "batch", 2)), "rows"),
        cols(distribute(g.cols, Layout::inner_sharded(grid, "model", 2)), "cols") {}
};

// Every local shard of `t` holds the matching box of `global`.
bool shards_match(const DTensor& t, const Tensor& global) {
  const Mesh& mesh = t.mesh();
  for (int64_t i = 0; i < mesh.num_local_devices(); ++i) {
    const int64_t device = mesh.local_device_ids()[static_cast<size_t>(i)];
    Tensor expected = slice_box(global, t.layout().shard_offset(global.shape(), device),
                                t.layout().shard_shape(global.shape(), device));
    if (!bitwise_equal(t.shard(i), expected)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("a save by 2 processes restores into 4 processes and into 1") {
  const Globals g;
  const std::string path = fresh_directory() + "/ckpt";
  std::vector<std::string> errors = run_processes(2, [&](int p) {
    Saved s(g, p, 2);
    int64_t step = 12;
    Checkpoint c;
    c.add_variables("", {s.rep, s.rows, s.cols});
    c.add_int("step", &step);
    c.save(path);
  });
  CHECK(errors == std::vector<std::string>(2));

  // One file and one part per process; each distinct shard in the file of its lowest holder.
  CHECK(list_names(path) == std::vector<std::string>{"index.json", "shards-00000-of-00002.json",
                                                     "shards-00000-of-00002.safetensors",
                                                     "shards-00001-of-00002.json",
                                                     "shards-00001-of-00002.safetensors"});
  CHECK(list_names(path + "/..") == std::vector<std::string>{"ckpt"});
  nlohmann::json index = nlohmann::json::parse(read_text(path + "/index.json"));
  CHECK(index["num_processes"] == 2);
  auto files_of = [&](const char* name) {
    std::vector<int> files;
    for (const auto& s : index["variables"][name]["shards"]) files.push_back(s["file"]);
    return files;
  };
  CHECK(files_of("rep") == std::vector<int>{0});
  CHECK(files_of("rows") == std::vector<int>{0, 0, 1, 1});
  CHECK(files_of("cols") == std::vector<int>{0, 0});  // devices 0 and 1 (batch 0) own both

  // Four processes, other layouts: each builds only its own shards.
  std::vector<std::vector<bool>> ok(4);
  errors = run_processes(4, [&](int p) {
    Mesh line = Mesh::create({{"batch", 4}}, DeviceType::kCPU, p, 4);
    Mesh grid = Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kCPU, p, 4);
    DVariable rep(zeros({13, 7}, Layout::batch_sharded(line, "batch", 2, 1)), "rep");
    DVariable rows(zeros({13, 7}, Layout::replicated(line, 2), DType::kF64), "rows");
    DVariable cols(zeros({5, 11}, Layout({"model", "batch"}, grid), DType::kI32), "cols");
    int64_t step = 0;
    Checkpoint c;
    c.add_variables("", {rep, rows, cols});
    c.add_int("step", &step);
    c.restore(path);
    ok[static_cast<size_t>(p)] = {shards_match(rep.value(), g.rep),
                                  shards_match(rows.value(), g.rows),
                                  shards_match(cols.value(), g.cols), step == 12};
  });
  CHECK(errors == std::vector<std::string>(4));
  for (int p = 0; p < 4; ++p) {
    INFO("process " << p);
    CHECK(ok[static_cast<size_t>(p)] == std::vector<bool>{true, true, true, true});
  }

  // One process (the ordinary in-process backend).
  Mesh one = Mesh::create({{"batch", 3}}, DeviceType::kCPU);
  DVariable rep(zeros({13, 7}, Layout::batch_sharded(one, "batch", 2)), "rep");
  DVariable rows(zeros({13, 7}, Layout::batch_sharded(one, "batch", 2, 1), DType::kF64), "rows");
  DVariable cols(zeros({5, 11}, Layout::replicated(one, 2), DType::kI32), "cols");
  int64_t step = 0;
  Checkpoint c;
  c.add_variables("", {rep, rows, cols});
  c.add_int("step", &step);
  c.restore(path);
  CHECK(bitwise_equal(to_global(rep.value()), g.rep));
  CHECK(bitwise_equal(to_global(rows.value()), g.rows));
  CHECK(bitwise_equal(to_global(cols.value()), g.cols));
  CHECK(step == 12);
}

TEST_CASE("when one process cannot restore, none changes anything") {
  const Globals g;
  const std::string path = fresh_directory() + "/ckpt";
  run_processes(2, [&](int p) {
    Saved s(g, p, 2);
    Checkpoint c;
    c.add_variables("", {s.rep, s.rows, s.cols});
    c.save(path);
  });
  std::vector<int> unchanged(2, 0);  // not vector<bool>: the threads write neighbouring bits
  std::vector<std::string> errors = run_processes(2, [&](int p) {
    Mesh line = Mesh::create({{"batch", 4}}, DeviceType::kCPU, p, 2);
    DVariable rep(zeros({13, 7}, Layout::replicated(line, 2)), "rep");
    Checkpoint c;
    c.set_strict(false);
    c.add_variable("rep", rep);
    if (p == 1) {  // process 1 tracks a variable the checkpoint does not have
      DVariable other(zeros({2}, Layout::replicated(line, 1)), "other");
      c.add_variable("other", other);
    }
    try {
      c.restore(path);
    } catch (...) {
      unchanged[static_cast<size_t>(p)] =
          shards_match(rep.value(), Tensor::zeros({13, 7}, DType::kF32));
      throw;
    }
  });
  CHECK(errors[0] ==
        "[Checkpoint::restore] another process failed to restore " + path + "; see its error");
  CHECK(errors[1] == "[Checkpoint::restore] variable 'other' is not in " + path);
  CHECK(unchanged == std::vector<int>{1, 1});
}
