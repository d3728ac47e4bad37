// Runtime: start-up and shutdown of a dtensor process, alone or as one rank of an mpirun job.
//
//   int main(int argc, char** argv) {
//     return dtensor::run_main(argc, argv, [&](dtensor::Runtime& rt) { ...; return 0; });
//   }
//
// Runtime::init detects a launch by mpirun (from the launcher's environment), initialises MPI
// with thread support, records this process's rank and the world size (runtime/process.h), and
// registers MPI as the CPU inter-process collective backend (runtime/backend_registry.h), so CPU
// meshes spanning processes use the in-process backend composed with MPI. Without mpirun it is a
// one-process runtime. It consumes its own flags from argv:
//   --virtual_cpus=N or --virtual_cpus N   virtual CPU devices in this process (or
//                                          DTENSOR_VIRTUAL_CPUS=N)
// Meshes from create_mesh then span every process, process k owning devices [k*L, (k+1)*L).
//
// Faults: in a multi-process job an exception escaping run_main's body (or any uncaught
// exception, or a Runtime destroyed while one unwinds) prints the error with the process's rank
// and ends every process of the job (MPI_Abort), so no rank waits forever in a collective.
// A process whose program ends normally tells the others at shutdown and waits for all of them
// before MPI_Finalize; one still waiting for it in a collective throws CommunicationError
// ("[all_reduce] process 1 has finished its program ...", runtime/mpi/control_channel.h), which
// ends the job the same way unless caught.
//
// One Runtime per process; init twice throws. Not copyable; movable.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace dtensor {

class Runtime {
 public:
  static Runtime init(int& argc, char** argv);

  Runtime(Runtime&& other) noexcept;
  Runtime& operator=(Runtime&&) = delete;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  // Shuts MPI down; ends the whole job instead when an exception is unwinding.
  ~Runtime();

  int64_t process_index() const { return process_index_; }
  int64_t num_processes() const { return num_processes_; }
  // True when launched by mpirun, even with one process.
  bool uses_mpi() const { return uses_mpi_; }
  // Virtual CPU devices of this process.
  int64_t num_local_devices() const;

  // Prints `message` to stderr, prefixed in a job of several processes with this process's rank
  // and host ("dtensor: process 2 of 4 (host node-b): "), and ends every process of the job with
  // exit code `code`.
  [[noreturn]] static void abort_job(std::string_view message, int code = 1);

 private:
  Runtime(int64_t index, int64_t count, bool uses_mpi)
      : process_index_(index), num_processes_(count), uses_mpi_(uses_mpi), active_(true) {}

  int64_t process_index_ = 0;
  int64_t num_processes_ = 1;
  bool uses_mpi_ = false;
  bool active_ = false;
};

// Starts a Runtime (which takes its flags out of argc/argv), runs `body`, and shuts down. An
// exception from body is printed; in a job of several processes it ends the job (non-zero exit on
// every rank), alone it returns 1. A non-zero return from body in a multi-process job also ends the
// job, since other ranks may be waiting for this one.
int run_main(int& argc, char** argv, const std::function<int(Runtime&)>& body);

}  // namespace dtensor
