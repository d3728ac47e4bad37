#include "runtime/cuda/cuda_check.h"

#include <new>

#include "runtime/cuda/gpu_devices.h"

namespace dtensor::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* function,
                      const Device* device) {
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error so later calls succeed
    throw std::bad_alloc();
  }
  if (device == nullptr) {
    throw_error<CudaError>(function, "{} failed: {}", call, cudaGetErrorString(status));
  }
  throw_error<CudaError>(function, "{} failed on {} (physical GPU {}): {}", call,
                         device_to_string(*device), physical_gpu_of(*device),
                         cudaGetErrorString(status));
}

}  // namespace dtensor::cuda
