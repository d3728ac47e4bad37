// The seed MLP's training step (forward, backward, Adam; global batch 128) on a batch=8 mesh over
// two processes, with the gradient all-reduce overlapped with backward (buckets started as
// gradients are finished, reduced by each process's MPI communication thread, ops/autograd.h)
// and without it (one blocking all-reduce per variable after backward), captured
// (dtensor::function) and eager: the four modes take turns in the same run. Rank 0 prints the
// median of each:
//   {"bench":"overlap","mesh":"batch=8","processes":2,"step":"captured","overlap":1,...}
// DTENSOR_OVERLAP_TRACE=1 prints when each bucket was queued, reduced and waited for, per process
// (runtime/mpi/mpi_backend.cc).
// Run directly and it relaunches itself under mpirun -np 2 (each process with one pool thread,
// unless DTENSOR_NUM_THREADS says otherwise: two processes on two cores).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "examples/mnist/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"

namespace {
using namespace dtensor;

// Not started by mpirun: start two copies of this program under it, with the same flags.
void relaunch_under_mpirun(int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  setenv("DTENSOR_NUM_THREADS", "1", 0);
  std::vector<char*> args = {const_cast<char*>("mpirun"),
                             const_cast<char*>("--oversubscribe"),
                             const_cast<char*>("--bind-to"),
                             const_cast<char*>("none"),
                             const_cast<char*>("-np"),
                             const_cast<char*>("2"),
                             self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  std::fprintf(stderr, "overlap: relaunching under mpirun -np 2\n");
  execvp("mpirun", args.data());
  std::perror("overlap: cannot run mpirun");
}

// One way to run the step: eager or captured, overlap on or off (a captured step freezes the
// setting it was traced with, so each captured mode has its own Function).
struct Mode {
  bool captured;
  bool overlap;
  std::function<void()> step;
  std::vector<double> times;
};

int run(const Runtime& rt, double bucket_cap_mb, int rounds) {
  Mesh mesh = create_mesh("batch=8");
  examples::Mlp model(mesh, {784, 700, 500, 10}, 22);
  std::vector<DVariable> vars = model.variables();
  Adam optimizer(1e-3);
  const DTensor x = random_uniform({128, 784}, model.batch_layout(2), 1);
  const DTensor labels =
      cast(scale(random_uniform({128}, model.batch_layout(1), 2), 9.99), DType::kI32);
  auto loss_and_update = [&](const DTensor& images, const DTensor& y) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(images), y));
    optimizer.apply(vars, tape.gradient(loss, vars));
    return loss;
  };
  auto captured_step = [&] {
    return std::make_shared<Function>(function([&](const std::vector<DTensor>& args) {
      return std::vector<DTensor>{loss_and_update(args[0], args[1])};
    }));
  };
  std::shared_ptr<Function> with_overlap = captured_step(), without_overlap = captured_step();
  std::vector<Mode> modes;
  for (bool captured : {true, false}) {
    for (bool overlap : {false, true}) {
      std::function<void()> step = [&] { loss_and_update(x, labels); };
      if (captured) {
        std::shared_ptr<Function> f = overlap ? with_overlap : without_overlap;
        step = [f, &x, &labels] { (*f)({x, labels}); };
      }
      modes.push_back({captured, overlap, std::move(step), {}});
    }
  }
  // The modes take turns, a few steps each, the last one timed, every process in step.
  constexpr int kWarmup = 2, kStepsPerTurn = 3;
  for (int round = 0; round < kWarmup + rounds; ++round) {
    for (Mode& mode : modes) {
      set_gradient_reduction_options({mode.overlap, bucket_cap_mb});
      for (int i = 1; i < kStepsPerTurn; ++i) mode.step();
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      mode.step();
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round >= kWarmup) mode.times.push_back(took);
    }
  }
  if (rt.process_index() == 0) {
    for (Mode& mode : modes) {
      std::vector<double>& t = mode.times;
      std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
      bench::report("overlap",
                    {{"mesh", std::string("batch=8")},
                     {"processes", rt.num_processes()},
                     {"batch", int64_t{128}},
                     {"step", std::string(mode.captured ? "captured" : "eager")},
                     {"overlap", int64_t{mode.overlap}},
                     {"bucket_cap_mb", bucket_cap_mb}},
                    t[t.size() / 2] * 1e3, "ms/step");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double bucket_cap_mb = 25.0;
  int64_t rounds = 30;
  // Flags first, so --help and mistakes never start mpirun.
  dtensor::cli::Flags flags("overlap",
                            "The seed MLP's step on batch=8 over 2 processes with the gradient "
                            "all-reduce overlapped with backward and without (relaunches itself "
                            "under mpirun -np 2).");
  flags.add_double("--bucket_cap_mb", &bucket_cap_mb, "bucket size of the overlapped reduction",
                   /*positive=*/true);
  flags.add_int("--rounds", &rounds, "timed rounds per mode", 1, 100000);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) {
    relaunch_under_mpirun(argc, argv);
    return 1;
  }
  return run_main(argc, argv,
                  [&](Runtime& rt) { return run(rt, bucket_cap_mb, static_cast<int>(rounds)); });
}
