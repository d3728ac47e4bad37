// The one way the .cu files launch a kernel: checked_launch runs `kernel<<<blocks, threads, 0,
// stream>>>(args...)` and then asks cudaGetLastError whether the launch itself failed (a bad
// configuration, no kernel image for this GPU's architecture, a sticky earlier error), which a
// bare launch leaves unnoticed until some later call. A failure throws CudaError naming the
// kernel (launch_failed, launch.h). Errors inside the running kernel still surface at the next
// synchronization.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/launch.h"

namespace dtensor::kernels::cuda_launch {

template <typename... Params, typename... Args>
void checked_launch(const char* name, void (*kernel)(Params...), dim3 blocks, dim3 threads,
                    cudaStream_t stream, Args&&... args) {
  kernel<<<blocks, threads, 0, stream>>>(std::forward<Args>(args)...);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) launch_failed(status, name);
}

}  // namespace dtensor::kernels::cuda_launch
