#include "kernels/cuda/tf32.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace dtensor::kernels {
namespace {

std::atomic<bool>& flag() {
  static std::atomic<bool> allowed{[] {
    const char* env = std::getenv("DTENSOR_ALLOW_TF32");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }()};
  return allowed;
}

}  // namespace

void set_cuda_allow_tf32(bool allow) { flag().store(allow, std::memory_order_relaxed); }

bool cuda_tf32_allowed() { return flag().load(std::memory_order_relaxed); }

}  // namespace dtensor::kernels
