// A job that all-reduces over every process, step after step, until one of them fails: the
// failure tests of //tests:multi_host_failure_test run it on network-namespace hosts.
//
//   host_failure_mpi_main --fail=kill|throw|none --rank=R --after=N [--steps=M] [--ready_file=F]
//
// kill: process R starts its all-reduce of step N and SIGKILLs itself while it is in flight;
// throw: process R throws from its program before step N's all-reduce; none: nobody fails (a
// link taken down from outside does). After step N-1 every process prints "step N reached at T"
// (T in seconds since the epoch) and process 0 creates F, so that a test can time what follows.
// Steps end after M (default 3000) or 120 s, whichever comes first.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dtensor/runtime.h"
#include "runtime/mpi/mpi_backend.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

namespace {

struct Options {
  std::string fail = "none", ready_file;
  int64_t rank = 0, after = 20, steps = 3000;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view name) -> const char* {
      return arg.substr(0, name.size()) == name ? argv[i] + name.size() : nullptr;
    };
    if (const char* v = value("--fail=")) o.fail = v;
    if (const char* v = value("--rank=")) o.rank = std::atoll(v);
    if (const char* v = value("--after=")) o.after = std::atoll(v);
    if (const char* v = value("--steps=")) o.steps = std::atoll(v);
    if (const char* v = value("--ready_file=")) o.ready_file = v;
  }
  return o;
}

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return run_main(argc, argv, [&](Runtime& rt) {
    std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
    Group group;
    for (int64_t q = 0; q < rt.num_processes(); ++q) {
      group.devices.push_back(q);
      group.owners.push_back(q);
    }
    group.self = rt.process_index();
    const bool failing = rt.process_index() == o.rank;
    const auto began = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < o.steps; ++step) {
      if (std::chrono::steady_clock::now() - began > std::chrono::seconds(120)) break;
      if (step == o.after) {
        std::printf("process %lld: step %lld reached at %.3f\n",
                    static_cast<long long>(rt.process_index()), static_cast<long long>(step),
                    epoch_seconds());
        std::fflush(stdout);
        if (rt.process_index() == 0 && !o.ready_file.empty()) std::ofstream(o.ready_file) << step;
        if (failing && o.fail == "throw") {
          throw std::runtime_error("process " + std::to_string(rt.process_index()) +
                                   " throws at step " + std::to_string(step));
        }
        if (failing && o.fail == "kill") {
          std::unique_ptr<PendingCollective> pending = backend->all_reduce_start(
              group, {{Tensor::zeros({1 << 18}, DType::kF32)}}, ReduceOp::kSum);
          raise(SIGKILL);
        }
      }
      backend->all_reduce(group, {Tensor::zeros({1 << 18}, DType::kF32)}, ReduceOp::kSum);
    }
    return 0;
  });
}
