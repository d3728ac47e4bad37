// The entry point of the GPU test binaries. With a GPU they run every test. Without one they run
// only the tests tagged [host] (host-side logic, such as the GPU placement rule) and say that the
// rest were skipped, so that `bazel test //...` stays green on machines with CUDA but no GPU,
// except on a GPU machine: there (DTENSOR_REQUIRE_GPU=1, which tools/gpu_run_all.sh sets, or an
// NVIDIA device node) no visible GPU, whether none is found or cudaGetDeviceCount fails (a
// driver mismatch), fails the binary instead of passing untested.
#define CATCH_CONFIG_RUNNER
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/cuda/gpu_devices.h"

namespace {

// Why this machine must have a GPU, or empty when it need not.
std::string gpu_required() {
  const char* env = std::getenv("DTENSOR_REQUIRE_GPU");
  if (env != nullptr && std::strcmp(env, "1") == 0) return "DTENSOR_REQUIRE_GPU=1";
  if (::access("/dev/nvidia0", F_OK) == 0) return "/dev/nvidia0 exists";
  return "";
}

}  // namespace

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (dtensor::cuda::physical_gpu_count() > 0) return session.run();
  const std::string& reason = dtensor::cuda::no_gpu_reason();
  if (const std::string required = gpu_required(); !required.empty()) {
    std::fprintf(stderr, "GPU tests FAILED: no GPU visible (%s) on a GPU machine (%s)\n",
                 reason.c_str(), required.c_str());
    return 1;
  }
  Catch::ConfigData host_only = session.configData();
  host_only.testsOrTags = {"[host]"};
  session.useConfigData(host_only);
  const auto& config = session.config();
  const bool any = !Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(),
                                       config)
                        .empty();
  std::printf("GPU tests skipped: no GPU visible (%s)%s\n", reason.c_str(),
              any ? "; running the [host] tests" : "");
  return any ? session.run() : 0;
}
