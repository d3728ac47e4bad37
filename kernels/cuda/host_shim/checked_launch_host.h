// checked_launch (kernels/cuda/checked_launch.cuh) for the host build of cnn.cu (cuda_host.h):
// runs the kernel on the calling thread, synchronously.
#pragma once

#include <utility>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/host_shim/cuda_host.h"

namespace dtensor::kernels::cuda_launch {

template <typename... Params, typename... Args>
void checked_launch(const char*, void (*kernel)(Params...), dim3, dim3, cudaStream_t,
                    Args&&... args) {
  kernel(std::forward<Args>(args)...);
}

}  // namespace dtensor::kernels::cuda_launch
