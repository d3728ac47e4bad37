#include "runtime/cuda/gpu_collectives.h"

#include "runtime/backend_registry.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"
#include "runtime/gpu_in_process_backend.h"

namespace dtensor::cuda {

std::shared_ptr<CollectiveBackend> make_gpu_in_process_backend() {
  return dtensor::make_gpu_in_process_backend(GpuPlacement{physical_gpu_of, to_device},
                                              "in-process GPU");
}

void register_gpu_collectives() {
  register_collective_backends(DeviceType::kGPU, make_gpu_in_process_backend(), nullptr);
}

}  // namespace dtensor::cuda
