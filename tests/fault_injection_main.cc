// A small data-parallel training loop in which one rank fails on purpose, for the fault test
// (runtime_fault_test.sh): the job must end on every rank within seconds, with the error printed.
//
//   fault_injection_main --mode=throw|exit|kill|return --fail_rank=R --fail_step=S [--steps=N]
//                        [--run_tag=T]   (ignored: lets the test find its own processes)
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "dtensor/creation.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/optim/optimizers.h"

namespace {
using namespace dtensor;

std::string flag(int argc, char** argv, std::string_view name, std::string fallback) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.substr(0, prefix.size()) == prefix) return std::string(arg.substr(prefix.size()));
  }
  return fallback;
}

int train(int argc, char** argv, const Runtime& rt) {
  const std::string mode = flag(argc, argv, "mode", "throw");
  const int64_t fail_rank = std::stoll(flag(argc, argv, "fail_rank", "1"));
  const int64_t fail_step = std::stoll(flag(argc, argv, "fail_step", "3"));
  const int64_t steps = std::stoll(flag(argc, argv, "steps", "1000000"));

  configure_virtual_cpus(2);
  Mesh mesh = create_mesh({{"batch", 2 * rt.num_processes()}});
  DVariable w(random_uniform({64, 8}, Layout::replicated(mesh, 2), 1, -0.1, 0.1), "w");
  DTensor x = random_uniform({32, 64}, Layout::batch_sharded(mesh, "batch", 2), 2);
  DTensor y = random_uniform({32, 8}, Layout::batch_sharded(mesh, "batch", 2), 3);
  SGD optimizer(0.01);
  for (int64_t step = 0; step < steps; ++step) {
    if (step == fail_step && rt.process_index() == fail_rank) {
      // The time (seconds since the epoch), from which the test measures how long the job takes
      // to end.
      const double now = std::chrono::duration<double>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
      std::fprintf(stderr, "process %lld: failing at step %lld (%s) at %.3f\n",
                   static_cast<long long>(rt.process_index()), static_cast<long long>(step),
                   mode.c_str(), now);
      std::fflush(stderr);
      if (mode == "exit") std::exit(3);
      if (mode == "kill") std::raise(SIGKILL);
      if (mode == "return") return 0;  // a normal end while the others still train
      throw_error<InvalidArgumentError>("train", "injected failure at step {} on process {}", step,
                                        rt.process_index());
    }
    GradientTape tape;
    tape.watch(w);
    DTensor loss = reduce_mean(square(sub(matmul(x, w.value()), y)));
    optimizer.apply({w}, tape.gradient(loss, {w}));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [&](Runtime& rt) { return train(argc, argv, rt); });
}
