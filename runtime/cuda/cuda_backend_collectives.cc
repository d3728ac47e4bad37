// Registers the CUDA GPU backend with the in-process GPU collectives as its make_collectives
// (cuda_allocator.h says why this is a target of its own). Linked by //dtensor:collectives in a
// --config=cuda build, so that every program gets them, and the host-staged MPI backend across
// processes, without registering anything itself.
#include "runtime/cuda/cuda_allocator.h"
#include "runtime/cuda/gpu_collectives.h"

namespace dtensor::cuda {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_cuda_backend(make_gpu_in_process_backend);
  return true;
}();

}  // namespace
}  // namespace dtensor::cuda
