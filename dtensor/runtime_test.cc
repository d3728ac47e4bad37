// The runtime outside mpirun: one process, its own flags taken out of argv.
#include "dtensor/runtime.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "dtensor/collectives.h"
#include "dtensor/virtual_devices.h"
#include "runtime/process.h"

using namespace dtensor;

namespace {

struct Args {
  std::vector<std::string> storage;
  std::vector<char*> pointers;
  int argc = 0;

  explicit Args(std::vector<std::string> args) : storage(std::move(args)) {
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    argc = static_cast<int>(storage.size());
  }
  std::vector<std::string> remaining() const {
    return std::vector<std::string>(pointers.begin(), pointers.begin() + argc);
  }
};

}  // namespace

TEST_CASE("without mpirun the runtime is one process with the in-process backend") {
  Args args({"prog", "--virtual_cpus=3", "--epochs=2"});
  {
    Runtime rt = Runtime::init(args.argc, args.pointers.data());
    CHECK(rt.num_processes() == 1);
    CHECK(rt.process_index() == 0);
    CHECK_FALSE(rt.uses_mpi());
    CHECK(rt.num_local_devices() == 3);
    CHECK(this_process().count == 1);
    CHECK(args.remaining() == std::vector<std::string>{"prog", "--epochs=2"});
    Mesh mesh = create_mesh({{"batch", 3}});
    CHECK(mesh.num_local_devices() == 3);
    CHECK(collective_backend_for(mesh).name() == "in-process");
    // No inter-process backend is registered: a mesh spanning processes stays on the in-process
    // one, which refuses the groups that leave this process.
    CHECK(collective_backend_for(Mesh::create({{"batch", 4}}, DeviceType::kCPU, 0, 2)).name() ==
          "in-process");
  }
  configure_virtual_cpus(1);
}

TEST_CASE("a second runtime in one process is an error; after shutdown init works again") {
  Args args({"prog"});
  Runtime rt = Runtime::init(args.argc, args.pointers.data());
  CHECK_THROWS_WITH(Runtime::init(args.argc, args.pointers.data()),
                    "[Runtime::init] a Runtime is already running in this process");
  Runtime moved = std::move(rt);
  CHECK(moved.num_processes() == 1);
}

TEST_CASE("the virtual CPU count comes from the flag or the environment and is checked") {
  {
    Args args({"prog", "--virtual_cpus=0"});
    CHECK_THROWS_WITH(Runtime::init(args.argc, args.pointers.data()),
                      "[Runtime::init] --virtual_cpus must be a positive integer, got '0'");
  }
  {
    Args args({"prog", "--virtual_cpus=two"});
    CHECK_THROWS_WITH(Runtime::init(args.argc, args.pointers.data()),
                      "[Runtime::init] --virtual_cpus must be a positive integer, got 'two'");
  }
  setenv("DTENSOR_VIRTUAL_CPUS", "5", 1);
  {
    Args args({"prog"});
    Runtime rt = Runtime::init(args.argc, args.pointers.data());
    CHECK(rt.num_local_devices() == 5);
  }
  unsetenv("DTENSOR_VIRTUAL_CPUS");
  configure_virtual_cpus(1);
}

TEST_CASE("run_main returns the body's code, and 1 with the message for an exception") {
  Args args({"prog"});
  CHECK(run_main(args.argc, args.pointers.data(), [](Runtime&) { return 0; }) == 0);
  CHECK(run_main(args.argc, args.pointers.data(), [](Runtime&) { return 7; }) == 7);
  CHECK(run_main(args.argc, args.pointers.data(),
                 [](Runtime&) -> int { throw std::runtime_error("boom"); }) == 1);
}

TEST_CASE("create_mesh names the device counts when they do not match") {
  configure_virtual_cpus(4);
  CHECK_THROWS_WITH(create_mesh({{"batch", 8}}),
                    "[create_mesh] mesh batch=8 has 8 devices but this process has 4 virtual "
                    "CPUs; call configure_virtual_cpus(8) first");
  configure_virtual_cpus(1);
}

TEST_CASE("--virtual_cpus N with a space is taken out of argv like --virtual_cpus=N") {
  {
    Args args({"prog", "--epochs", "2", "--virtual_cpus", "8", "--lr=1"});
    Runtime rt = Runtime::init(args.argc, args.pointers.data());
    CHECK(rt.num_local_devices() == 8);
    CHECK(args.remaining() == std::vector<std::string>{"prog", "--epochs", "2", "--lr=1"});
  }
  {
    Args args({"prog", "--virtual_cpus"});
    CHECK_THROWS_WITH(Runtime::init(args.argc, args.pointers.data()),
                      "[Runtime::init] --virtual_cpus needs a value");
  }
  {
    Args args({"prog", "--virtual_cpus", "x"});
    CHECK_THROWS_WITH(Runtime::init(args.argc, args.pointers.data()),
                      "[Runtime::init] --virtual_cpus must be a positive integer, got 'x'");
  }
  configure_virtual_cpus(1);
}
