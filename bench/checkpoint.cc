// Checkpoint save and restore throughput on 8 virtual devices, next to a plain sequential write
// (write + fsync) and read of the same number of bytes to one file, measured in the same run.
//
//   tools/bazel run //bench:checkpoint -- [--dir=directory]     (default $TMPDIR or /tmp)
//
// The model is 256 MB of distinct f32 bytes: an embedding sharded by rows, one kernel replicated
// (written once), one sharded by columns and one by rows, plus small biases. One JSON object per
// direction: "save" (Checkpoint::save, fsyncs included), "restore" (into the same layouts) and
// "restore_resharded" (into batch=2,model=4 layouts), each with checkpoint_gbps, plain_gbps and
// ratio = checkpoint / plain. Medians over repetitions; the page cache is warm for both reads.
#include <fcntl.h>
#include <unistd.h>
#include <optional>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"

namespace {

using namespace dtensor;

struct Model {
  std::vector<DVariable> vars;
  Checkpoint checkpoint;

  // `sharded` is the layout family: on {batch=8} rows/cols over batch; on {batch=2,model=4}
  // the same tensors over model, replicated over batch.
  Model(const Mesh& mesh, const std::string& dim, bool random_values) {
    auto make = [&](const Shape& shape, const Layout& layout, uint64_t seed, const char* name) {
      vars.emplace_back(random_values ? random_uniform(shape, layout, seed) : zeros(shape, layout),
                        name);
    };
    make({16384, 1024}, Layout::batch_sharded(mesh, dim, 2), 1, "embedding");
    make({4096, 4096}, Layout::replicated(mesh, 2), 2, "dense_0/kernel");
    make({4096}, Layout::replicated(mesh, 1), 3, "dense_0/bias");
    make({4096, 4096}, Layout::inner_sharded(mesh, dim, 2), 4, "dense_1/kernel");
    make({4096}, Layout::batch_sharded(mesh, dim, 1), 5, "dense_1/bias");
    make({4096, 4096}, Layout::batch_sharded(mesh, dim, 2), 6, "dense_2/kernel");
    checkpoint.add_variables("model", vars);
  }

  int64_t bytes() const {
    int64_t n = 0;
    for (const DVariable& v : vars) n += num_elements(v.shape()) * 4;
    return n;
  }
};

void check(bool ok, const char* what) {
  if (!ok) {
    std::perror(what);
    std::exit(1);
  }
}

void plain_write(const std::string& path, const char* data, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  check(fd >= 0, "open");
  for (size_t done = 0; done < n;) {
    ssize_t w = ::write(fd, data + done, n - done);
    check(w > 0, "write");
    done += static_cast<size_t>(w);
  }
  check(::fsync(fd) == 0, "fsync");
  check(::close(fd) == 0, "close");
}

void plain_read(const std::string& path, char* data, size_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "open");
  for (size_t done = 0; done < n;) {
    ssize_t r = ::read(fd, data + done, n - done);
    check(r > 0, "read");
    done += static_cast<size_t>(r);
  }
  check(::close(fd) == 0, "close");
}

// Median wall time of `body` over `reps` runs after one warm-up, `prepare` running untimed before
// each (removing the previous run's files, so every write goes to a new file).
double median_seconds(const std::function<void()>& prepare, const std::function<void()>& body,
                      int reps) {
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    prepare();
    auto start = std::chrono::steady_clock::now();
    body();
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) times.push_back(t);
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<size_t>(reps / 2)];
}

void report(const std::string& direction, int64_t bytes, double checkpoint_s, double plain_s) {
  const double checkpoint_gbps = static_cast<double>(bytes) / checkpoint_s / 1e9;
  const double plain_gbps = static_cast<double>(bytes) / plain_s / 1e9;
  bench::report("checkpoint",
                {{"direction", direction},
                 {"bytes", bytes},
                 {"devices", int64_t{8}},
                 {"checkpoint_gbps", checkpoint_gbps},
                 {"plain_gbps", plain_gbps},
                 {"ratio", checkpoint_gbps / plain_gbps}},
                checkpoint_gbps, "GB/s");
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const char* tmp = std::getenv("TMPDIR");
  std::string root = tmp != nullptr ? tmp : "/tmp";
  dtensor::cli::Flags flags("checkpoint",
                            "Checkpoint save and restore GB/s of a 256 MB model on 8 devices next "
                            "to a plain file write and read. Prints one JSON object per "
                            "direction.");
  flags.add_path("--dir", &root, "folder the checkpoints are written in (default $TMPDIR or /tmp)",
                 dtensor::cli::PathKind::kOutputDir);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const std::string dir = root + "/dtensor_checkpoint_bench_" + std::to_string(::getpid());
  fs::create_directories(dir);
  constexpr int kReps = 7;

  const Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Model model(mesh, "batch", true);
  const int64_t bytes = model.bytes();
  // Page-aligned, as tensor storage is 64-byte aligned: the kernel copies to and from a buffer
  // 16 bytes past a page boundary (where malloc puts large blocks) several times slower here.
  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(4096, static_cast<size_t>(bytes))), &std::free);
  std::memset(buffer.get(), 1, static_cast<size_t>(bytes));
  std::fprintf(stderr, "checkpoint bench: %.0f MB in %s\n", bytes / 1e6, dir.c_str());

  // Save: a new directory each time (removed outside the timed part), as a training run does.
  int counter = 0;
  std::string last;
  const double save_s = median_seconds(
      [&] {
        if (!last.empty()) fs::remove_all(last);
        last = dir + "/ckpt-" + std::to_string(counter++);
      },
      [&] { model.checkpoint.save(last); }, kReps);
  const std::string plain = dir + "/plain.bin";
  const double write_s =
      median_seconds([&] { fs::remove(plain); },
                     [&] { plain_write(plain, buffer.get(), static_cast<size_t>(bytes)); }, kReps);
  report("save", bytes, save_s, write_s);

  // Restore into fresh variables of the same layouts, and into other layouts on another mesh.
  Model same(mesh, "batch", false);
  auto nothing = [] {};
  const double restore_s = median_seconds(
      nothing, [&] { same.checkpoint.restore(last); }, kReps);
  const double read_s = median_seconds(
      nothing, [&] { plain_read(plain, buffer.get(), static_cast<size_t>(bytes)); }, kReps);
  report("restore", bytes, restore_s, read_s);

  Model resharded(Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU), "model", false);
  const double resharded_s = median_seconds(
      nothing, [&] { resharded.checkpoint.restore(last); }, kReps);
  report("restore_resharded", bytes, resharded_s, read_s);

  fs::remove_all(dir);
}
