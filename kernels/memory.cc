// The device switch of runtime/element_loops.h: one definition per element loop of the kernel
// list (kernels/kernel_list.h).
#include "runtime/element_loops.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

#define DTENSOR_ELEMENT_LOOP(ret, name, params, args, op, devices, check) \
  ret name params DTENSOR_KERNEL_FRONT(name, args, op, devices, check)
#include "kernels/kernel_list.h"

Tensor host_readable(const Tensor& t) {
  if (t.memory_space() == MemorySpace::kHost) return t;
  return gpu::copy_to_host(t);
}

Tensor on_device(const Tensor& host, const Device& device) {
  if (host.memory_space() != MemorySpace::kHost) {
    throw_error<InternalError>("on_device", "{} is not in host memory", host.to_string());
  }
  if (memory_space_of(device.type) == MemorySpace::kHost) return host.with_device(device);
  return gpu::copy_to_gpu(host, device);
}

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  return cpu::philox4x32_10(counter, key);
}

}  // namespace dtensor::kernels
