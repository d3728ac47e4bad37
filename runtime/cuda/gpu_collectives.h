// Collectives over GPU meshes of one process: the in-process GPU backend and its registration.
//
// The in-process GPU backend runs every collective as device copies and reduction kernels on the
// members' streams (the block kernels behind runtime/element_loops.h): it stages members that sit on
// other physical GPUs onto the first member's GPU (peer copies), reduces or concatenates there in
// the CPU's pairwise order (so results are bit-identical to the CPU backend's), and hands each
// member its own copy of the result (a device-to-device copy on the GPU's one stream for logical
// devices of the same GPU, a peer copy otherwise).
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
