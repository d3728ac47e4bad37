// The collective backends of each device type: which transport a mesh's collectives go to.
//
// Every device type has two registered backends:
//   - `intra`: groups whose members all live in this process (CPU: the in-process backend,
//     threads and shared memory). A mesh owned by one process uses it alone.
//   - `inter`: a flat inter-process backend, one member per process (CPU: MPI, registered by
//     dtensor/runtime.cc when launched by mpirun). A mesh spanning processes uses
//     make_hierarchical_backend(intra, inter): local stage, then across processes, then share.
//     Without one, such a mesh uses `intra`, which serves the groups that stay in one process
//     and refuses the others.
//
// Defaults: CPU has the in-process backend and no inter-process one; GPU has the collectives of
// the registered GPU backend when it brings its own (runtime/gpu_backend.h: the emulated GPU), and
// none otherwise, so a collective over a GPU mesh throws "[all_reduce] no collective backend is
// registered for GPU devices ..." (a CUDA build registers cuda::register_gpu_collectives()). NCCL goes in runtime/nccl/: nccl_backend.{h,cc} with make_nccl_backend(), a
// flat CollectiveBackend over one ncclComm per group (cached like MPI's communicators; one rank
// per GPU), registered as the GPU inter backend (and as intra for several GPUs of one process,
// through ncclCommInitAll) by dtensor/runtime.cc; no_nccl.cc, linked where NCCL is not built,
// makes make_nccl_backend() throw UnimplementedError, so no #ifdef spreads through the tree.
//
// Tests install doubles the same way (runtime/threaded_processes_backend.h registered as CPU
// inter backend emulates processes with threads) and reset_collective_backends() afterwards.
//
// Selection is an array lookup by device type, no lock: registering must not race with
// collectives (register at start-up or between phases of a test). The registry shares
// ownership of the backends it holds.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/collective_backend.h"
#include "runtime/device.h"

namespace dtensor {

// Registers the backends of `type`, replacing earlier ones. `intra` may be null (no backend for
// the type); `inter` may be null (meshes spanning processes then use `intra`).
void register_collective_backends(DeviceType type, std::shared_ptr<CollectiveBackend> intra,
                                  std::shared_ptr<CollectiveBackend> inter);

// Back to the defaults above (drops, and so frees, every registered backend not held elsewhere).
void reset_collective_backends();

// The backend a collective over devices of `type` goes to: the intra-process one when all the
// devices live in this process, otherwise the composed one (dtensor/mesh_backend.h asks for a
// mesh's). Throws UnimplementedError "[collective] no collective backend is registered for GPU
// devices (mesh batch=2)" when the type has none; `collective` names the calling collective and
// `mesh_dims` the devices (a mesh's dims_string()) in that message.
CollectiveBackend& collective_backend_for(DeviceType type, bool spans_processes,
                                          std::string_view mesh_dims, const char* collective);

}  // namespace dtensor
