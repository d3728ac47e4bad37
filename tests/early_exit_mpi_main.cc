// The last process of an mpirun job returns from its program at once while the others enter an
// all-reduce with it: they must get a CommunicationError saying so within seconds, not wait
// forever. Exits 0 when every survivor got the expected error (then the job shuts down normally).
// With --after_one_all_reduce every process first takes part in one all-reduce, so that processes
// of one host wait for each other in shared memory (runtime/mpi/shared_reducer.h) rather than
// over MPI, and the communicators exist already.
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "dtensor/runtime.h"
#include "runtime/error.h"
#include "runtime/mpi/mpi_backend.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

int main(int argc, char** argv) {
  bool after_one_all_reduce = false;
  for (int i = 1; i < argc; ++i) {
    after_one_all_reduce =
        after_one_all_reduce || std::string_view(argv[i]) == "--after_one_all_reduce";
  }
  return run_main(argc, argv, [&](Runtime& rt) {
    const int64_t last = rt.num_processes() - 1;
    std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
    Group group;
    for (int64_t q = 0; q <= last; ++q) {
      group.devices.push_back(q);
      group.owners.push_back(q);
    }
    group.self = rt.process_index();
    if (after_one_all_reduce) {
      backend->all_reduce(group, {Tensor::zeros({10}, DType::kF32)}, ReduceOp::kSum);
    }
    if (rt.process_index() == last) return 0;
    const auto began = std::chrono::steady_clock::now();
    std::string error = "no error";
    try {
      backend->all_reduce(group, {Tensor::zeros({10}, DType::kF32)}, ReduceOp::kSum);
    } catch (const CommunicationError& e) {
      error = e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    const std::string expected =
        "[all_reduce] process " + std::to_string(last) +
        " has finished its program (its runtime shut down) while process " +
        std::to_string(rt.process_index()) +
        " (this one) waits for it in all_reduce(sum) of f32 [10]; every process must make the "
        "same collective calls, in the same order";
    if (error != expected) {
      std::fprintf(stderr, "process %lld: expected\n  %s\ngot\n  %s\n",
                   static_cast<long long>(rt.process_index()), expected.c_str(), error.c_str());
      return 1;
    }
    if (seconds > 15) {
      std::fprintf(stderr, "process %lld: the error came after %.1f s (limit 15)\n",
                   static_cast<long long>(rt.process_index()), seconds);
      return 1;
    }
    std::printf(
        "process %lld: got the error after %.3f s (%lld all-reduces through shared memory)\n",
        static_cast<long long>(rt.process_index()), seconds,
        static_cast<long long>(shared_memory_reductions()));
    return 0;
  });
}
