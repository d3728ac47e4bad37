// CUDA failures as dtensor errors: check_cuda turns a failed CUDA runtime call into a CudaError
// (a dtensor::Error) naming the dtensor function,
// the CUDA call and CUDA's own error string, e.g.
//   "[Tensor::empty] cudaMallocAsync failed on GPU:3 (physical GPU 0): out of memory".
// Out-of-memory becomes std::bad_alloc so that Tensor::empty reports the request as it does on
// the host. Stateless; thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "runtime/device.h"
#include "runtime/error.h"

namespace dtensor::cuda {

// A CUDA runtime call failed: the device, the call and CUDA's message are in what().
class CudaError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* function,
                                   const Device* device);

inline void check_cuda(cudaError_t status, const char* call, const char* function,
                       const Device* device = nullptr) {
  if (status != cudaSuccess) throw_cuda_error(status, call, function, device);
}

}  // namespace dtensor::cuda
