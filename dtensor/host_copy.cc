#include "dtensor/host_copy.h"

#include "kernels/gpu/gpu_kernels.h"
#include "runtime/error.h"

namespace dtensor {

Tensor host_readable(const Tensor& t) {
  if (t.memory_space() == MemorySpace::kHost) return t;
  return kernels::gpu::copy_to_host(t);
}

Tensor on_device(const Tensor& host, const Device& device) {
  if (host.memory_space() != MemorySpace::kHost) {
    throw_error<InternalError>("on_device", "{} is not in host memory", host.to_string());
  }
  if (memory_space_of(device.type) == MemorySpace::kHost) return host.with_device(device);
  return kernels::gpu::copy_to_gpu(host, device);
}

}  // namespace dtensor
