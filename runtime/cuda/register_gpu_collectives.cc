// Registers the in-process GPU collective backend when the binary starts (see BUILD). The
// registry is a function-local static, so the order of static initializers does not matter.
#include "runtime/cuda/gpu_collectives.h"

namespace dtensor::cuda {
namespace {

const bool registered = [] {
  register_gpu_collectives();
  return true;
}();

}  // namespace
}  // namespace dtensor::cuda
