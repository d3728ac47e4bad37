// The entry point of the GPU test binaries: without a visible GPU they print one line and pass,
// so that `bazel test //...` stays green on machines with CUDA but no GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "runtime/cuda/gpu_devices.h"

int main(int argc, char* argv[]) {
  if (dtensor::cuda::physical_gpu_count() == 0) {
    std::printf("GPU tests skipped: no GPU visible (%s)\n", dtensor::cuda::no_gpu_reason().c_str());
    return 0;
  }
  return Catch::Session().run(argc, argv);
}
