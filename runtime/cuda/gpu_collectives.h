// Collectives over GPU meshes of one process: the in-process GPU backend and its registration.
//
// The in-process GPU backend is runtime/gpu_in_process_backend.h over CUDA's placement (logical
// devices on physical_gpu_of, peer copies through cuda::to_device).
//
// register_gpu_collectives() installs it as the GPU intra-process backend (backend_registry.h);
// NCCL, when registered, takes the groups that span processes. Call it once at start-up (tests,
// examples and benches of a CUDA build do); reset_collective_backends() removes it again.
//
// Thread-safety: the backend is stateless; see backend_registry.h for registration.
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor::cuda {

std::shared_ptr<CollectiveBackend> make_gpu_in_process_backend();

// Registers the in-process GPU backend for DeviceType::kGPU (no inter-process backend).
void register_gpu_collectives();

}  // namespace dtensor::cuda
