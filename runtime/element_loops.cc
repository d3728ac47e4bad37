// The fronts of runtime/element_loops.h: one definition per line of runtime/element_loop_list.h.
#include "runtime/element_loops.h"

#include "runtime/device_dispatch.h"
#include "runtime/error.h"

namespace dtensor::kernels {

#define DTENSOR_ELEMENT_LOOP(ret, name, params, args, op, devices, check)   \
  ret name params DTENSOR_DEVICE_FRONT(name, args, op, devices, check,     \
                                       gpu::ElementLoopTable, gpu::element_loop_table)
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP

Tensor host_readable(const Tensor& t) {
  if (t.memory_space() == MemorySpace::kHost) return t;
  return dispatch::gpu_entry(gpu::element_loop_table, &gpu::ElementLoopTable::copy_to_host,
                             "copy_to_host")(t);
}

Tensor on_device(const Tensor& host, const Device& device) {
  if (host.memory_space() != MemorySpace::kHost) {
    throw_error<InternalError>("on_device", "{} is not in host memory", host.to_string());
  }
  if (memory_space_of(device.type) == MemorySpace::kHost) return host.with_device(device);
  return dispatch::gpu_entry(gpu::element_loop_table, &gpu::ElementLoopTable::copy_to_gpu,
                             "copy_to_gpu")(host, device);
}

}  // namespace dtensor::kernels
