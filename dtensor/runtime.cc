#include "dtensor/runtime.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "dtensor/virtual_devices.h"
#include "runtime/backend_registry.h"
#include "runtime/error.h"
#include "runtime/gpu_backend.h"
#include "runtime/mpi/control_channel.h"
#include "runtime/mpi/host_staged_backend.h"
#include "runtime/mpi/mpi_backend.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/process.h"

namespace dtensor {
namespace {

std::atomic<bool> runtime_active{false};
std::atomic<bool> mpi_running{false};

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int64_t parse_count(std::string_view text, const char* what) {
  char* end = nullptr;
  std::string s(text);
  const long long n = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || n < 1) {
    throw_error<InvalidArgumentError>("Runtime::init", "{} must be a positive integer, got '{}'",
                                      what, s);
  }
  return n;
}

// Takes --virtual_cpus=N and --virtual_cpus N out of argv; the environment variable is the
// fallback.
int64_t take_virtual_cpus(int& argc, char** argv) {
  constexpr std::string_view kName = "--virtual_cpus";
  int64_t n = 0;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == kName) {
      if (i + 1 >= argc) {
        throw_error<InvalidArgumentError>("Runtime::init", "--virtual_cpus needs a value");
      }
      n = parse_count(argv[++i], "--virtual_cpus");
    } else if (arg.substr(0, kName.size() + 1) == "--virtual_cpus=") {
      n = parse_count(arg.substr(kName.size() + 1), "--virtual_cpus");
    } else {
      argv[kept++] = argv[i];
    }
  }
  if (kept < argc) argv[kept] = nullptr;
  argc = kept;
  if (n == 0) {
    if (const char* env = std::getenv("DTENSOR_VIRTUAL_CPUS")) {
      n = parse_count(env, "DTENSOR_VIRTUAL_CPUS");
    }
  }
  return n;
}

// The machine's name, so that a user of several hosts can find the failing process.
std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "unknown";
  return name;
}

// "dtensor: process 2 of 4 (host node-b): " under mpirun, "dtensor: " otherwise.
std::string rank_prefix() {
  ProcessInfo p = this_process();
  if (!mpi_running.load() || p.count == 1) return "dtensor: ";
  return "dtensor: process " + std::to_string(p.index) + " of " + std::to_string(p.count) +
         " (host " + host_name() + "): ";
}

[[noreturn]] void on_terminate() {
  std::string what = "terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  Runtime::abort_job(what, 1);
}

}  // namespace

Runtime Runtime::init(int& argc, char** argv) {
  if (runtime_active.exchange(true)) {
    throw_error<InvalidArgumentError>("Runtime::init",
                                      "a Runtime is already running in this "
                                      "process");
  }
  try {
    const int64_t virtual_cpus = take_virtual_cpus(argc, argv);
    if (virtual_cpus > 0) configure_virtual_cpus(virtual_cpus);
    if (!launched_by_mpirun()) return Runtime(0, 1, false);

    int provided = 0;
    check_mpi(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided), "Runtime::init",
              "MPI_Init_thread");
    mpi_running.store(true);
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "Runtime::init",
              "MPI_Comm_set_errhandler");
    if (provided < MPI_THREAD_SERIALIZED) {
      throw_error<CommunicationError>("Runtime::init",
                                      "MPI provides thread level {}, need at least "
                                      "MPI_THREAD_SERIALIZED ({})",
                                      provided, MPI_THREAD_SERIALIZED);
    }
    int rank = 0, size = 1;
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "Runtime::init", "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "Runtime::init", "MPI_Comm_size");
    set_this_process({rank, size});
    // CPU meshes spanning processes: local stage in-process, then MPI, then share.
    std::shared_ptr<CollectiveBackend> mpi = make_mpi_backend();
    register_collective_backends(DeviceType::kCPU, make_in_process_backend(), mpi);
    // GPU meshes likewise when the GPU backend brings its own collectives (the emulated GPU),
    // across processes through host copies (NCCL, where built, is registered instead).
    const GpuBackend* gpu = registered_gpu_backend();
    if (gpu != nullptr && gpu->make_collectives != nullptr) {
      register_collective_backends(DeviceType::kGPU, gpu->make_collectives(),
                                   make_host_staged_backend(mpi));
    }
    std::set_terminate(on_terminate);
    return Runtime(rank, size, true);
  } catch (...) {
    runtime_active.store(false);
    throw;
  }
}

Runtime::Runtime(Runtime&& other) noexcept
    : process_index_(other.process_index_),
      num_processes_(other.num_processes_),
      uses_mpi_(other.uses_mpi_),
      active_(other.active_) {
  other.active_ = false;
}

Runtime::~Runtime() {
  if (!active_) return;
  if (std::uncaught_exceptions() > 0 && num_processes_ > 1) {
    abort_job("a Runtime was destroyed while an exception was unwinding", 1);
  }
  if (uses_mpi_) {
    // The MPI backend frees its communicators while MPI is still up.
    reset_collective_backends();
    // MPI_Finalize gives no notice to a process still waiting for this one in a collective: say
    // that this one leaves (it then throws, ending the job) and wait until every process has.
    try {
      depart_from_job();
    } catch (const std::exception& e) {
      abort_job(e.what(), 1);
    }
    mpi_running.store(false);
    MPI_Finalize();
    set_this_process({0, 1});
  }
  runtime_active.store(false);
}

int64_t Runtime::num_local_devices() const { return num_virtual_cpus(); }

void Runtime::abort_job(std::string_view message, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s%.*s\n", rank_prefix().c_str(), static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  if (mpi_running.load()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int run_main(int& argc, char** argv, const std::function<int(Runtime&)>& body) {
  int code = 0;
  try {
    Runtime rt = Runtime::init(argc, argv);
    try {
      code = body(rt);
    } catch (const std::exception& e) {
      if (rt.num_processes() > 1) Runtime::abort_job(e.what(), 1);
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
    if (code != 0 && rt.num_processes() > 1) {
      Runtime::abort_job("exited with code " + std::to_string(code), code);
    }
  } catch (const std::exception& e) {
    // Runtime::init failed: nothing collective has started yet.
    std::fprintf(stderr, "%s\n", e.what());
    if (mpi_running.load()) Runtime::abort_job(e.what(), 1);
    return 1;
  }
  return code;
}

}  // namespace dtensor
