// All-reduce across the job's processes through the runtime (dtensor::all_reduce on a batch=N
// mesh, one device per process: the MPI backend) next to a raw MPI_Allreduce of the same bytes,
// measured in the same run, alternating, 1 KB to 16 MB. Rank 0 prints one JSON object per size:
//   {"bench":"mpi_allreduce","bytes":...,"runtime_us":...,"mpi_us":...,"ratio":...,...}
// ratio = runtime / raw (medians). Then the cost of the agreement the MPI backend runs before each
// collective (runtime/collective_agreement.h): small all-reduces (4 B to 4 KB) with it and
// without it, alternating in the same run, one object per size:
//   {"bench":"mpi_allreduce_agreement","bytes":...,"checked_us":...,"unchecked_us":...,...}
// DTENSOR_MPI_SHARED=0 measures MPI's own all-reduce instead of the shared-memory layer's (on one
// host the SharedReducer; on several, the host-aware reduction, runtime/mpi/host_reduction.h).
// Run directly and it relaunches itself under mpirun -np 2; under tools/netns_cluster.sh it runs
// on the hosts' processes (any count from 2).
#include <mpi.h>
#include <unistd.h>
#include <optional>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/collectives.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "runtime/mpi/mpi_backend.h"

namespace {
using namespace dtensor;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Not started by mpirun: start two copies of this program under it.
void relaunch_under_mpirun() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 0);
  std::fprintf(stderr, "mpi_allreduce: relaunching under mpirun -np 2\n");
  execlp("mpirun", "mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", self,
         static_cast<char*>(nullptr));
  std::perror("mpi_allreduce: cannot run mpirun");
}

// Small all-reduces through the runtime with and without the agreement step, alternating.
void measure_agreement(const Runtime& rt, const Mesh& mesh, MeshDimMask dims) {
  const char* shared = std::getenv("DTENSOR_MPI_SHARED");
  const bool shared_memory = shared == nullptr || shared[0] != '0';
  for (int64_t bytes = 4; bytes <= 4096; bytes *= 16) {
    const int64_t n = bytes / 4;
    const int reps = 2001;
    Tensor input = Tensor::zeros({n}, DType::kF32, Device{DeviceType::kCPU, rt.process_index()});
    Tensor raw_out = Tensor::zeros({n}, DType::kF32);
    std::vector<double> checked_s, unchecked_s, mpi_s;
    for (int r = 0; r < reps + 20; ++r) {
      for (const bool checked : {true, false}) {
        set_collective_agreement(checked);
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        std::vector<Tensor> out = all_reduce(mesh, dims, {input}, ReduceOp::kSum);
        const double t = seconds_since(start);
        bench::do_not_optimize(out);
        if (r >= 20) (checked ? checked_s : unchecked_s).push_back(t);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const auto start = std::chrono::steady_clock::now();
      MPI_Allreduce(input.raw_data(), raw_out.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      if (r >= 20) mpi_s.push_back(seconds_since(start));
    }
    set_collective_agreement(true);
    const double checked_us = median(checked_s) * 1e6;
    const double unchecked_us = median(unchecked_s) * 1e6;
    if (rt.process_index() == 0) {
      bench::report("mpi_allreduce_agreement",
                    {{"bytes", bytes},
                     {"processes", rt.num_processes()},
                     {"shared_memory", int64_t{shared_memory ? 1 : 0}},
                     {"checked_us", checked_us},
                     {"unchecked_us", unchecked_us},
                     {"check_cost_us", checked_us - unchecked_us},
                     {"mpi_us", median(mpi_s) * 1e6}},
                    checked_us / unchecked_us, "runtime/mpi");
    }
  }
}

int run(const Runtime& rt, int64_t reps_per_size, bool agreement) {
  if (rt.num_processes() < 2) {
    throw_error<InvalidArgumentError>("mpi_allreduce", "needs 2 processes or more, got {}",
                                      rt.num_processes());
  }
  configure_virtual_cpus(1);
  Mesh mesh = create_mesh({{"batch", rt.num_processes()}});
  const MeshDimMask dims = mesh.mask({"batch"});
  for (int64_t bytes = 1 << 10; bytes <= (int64_t{16} << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    const int64_t reps = reps_per_size > 0 ? reps_per_size : bytes >= (4 << 20) ? 21 : 101;
    Tensor input = Tensor::zeros({n}, DType::kF32, Device{DeviceType::kCPU, rt.process_index()});
    Tensor raw_out = Tensor::zeros({n}, DType::kF32);
    std::vector<double> runtime_s, mpi_s;
    for (int r = 0; r < reps + 3; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto start = std::chrono::steady_clock::now();
      std::vector<Tensor> out = all_reduce(mesh, dims, {input}, ReduceOp::kSum);
      const double t_runtime = seconds_since(start);
      bench::do_not_optimize(out);
      MPI_Barrier(MPI_COMM_WORLD);
      start = std::chrono::steady_clock::now();
      MPI_Allreduce(input.raw_data(), raw_out.raw_data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      const double t_mpi = seconds_since(start);
      if (r >= 3) {  // warm-up: communicator creation, buffer pool
        runtime_s.push_back(t_runtime);
        mpi_s.push_back(t_mpi);
      }
    }
    const double runtime_us = median(runtime_s) * 1e6;
    const double mpi_us = median(mpi_s) * 1e6;
    if (rt.process_index() == 0) {
      bench::report("mpi_allreduce",
                    {{"bytes", bytes},
                     {"processes", rt.num_processes()},
                     {"runtime_us", runtime_us},
                     {"mpi_us", mpi_us},
                     {"ratio", runtime_us / mpi_us}},
                    runtime_us / mpi_us, "runtime/mpi");
    }
  }
  if (agreement) measure_agreement(rt, mesh, dims);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Flags first, so --help and mistakes never start mpirun.
  dtensor::cli::Flags flags("mpi_allreduce",
                            "All-reduce through the runtime next to raw MPI_Allreduce on 2 "
                            "processes (relaunches itself under mpirun -np 2).");
  int64_t reps = 0;
  bool skip_agreement = false;
  flags.add_int("--reps", &reps, "timed repetitions per size (0: 101, 21 from 4 MB)", 0, 100000);
  flags.add_bool("--skip_agreement", &skip_agreement,
                 "leave out the agreement check's cost (slow on loaded namespace hosts)");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) {
    relaunch_under_mpirun();
    return 1;
  }
  return run_main(argc, argv, [&](Runtime& rt) { return run(rt, reps, !skip_agreement); });
}
