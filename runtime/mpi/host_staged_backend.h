// The host-staged backend: a flat inter-process backend for GPU meshes where NCCL is absent
// (issue 27). Each call copies this process's member from its device to host memory, runs the
// same collective over a flat host backend (MPI), and copies each result back onto the device of
// the member it belongs to: device -> host, MPI collective, host -> device.
//
// The copies are the device-neutral ones of runtime/element_loops.h (host_readable, on_device:
// the GPU backend's copy_to_host / copy_to_gpu), so the path is the same on CUDA and on the
// emulated GPU (runtime/emulated/), whose opaque memory proves in CI that nothing here reads
// shard memory on the host. Members already in host memory pass through without a copy: over CPU
// tensors the backend is its host backend. make_hierarchical_backend composes it with a GPU
// intra-process backend for meshes with several GPUs per process (dtensor/runtime.cc registers
// that for GPU meshes under mpirun when the GPU backend brings its own collectives).
//
// Every result is a fresh device copy per member, never shared. all_reduce_start hands the staged
// bucket to the host backend's own (MPI overlaps it on its communication thread) and copies the
// results back in wait(). Errors are the host backend's (the collective agreement included) and
// the copies'. Thread-safe as far as the host backend is; owns a share of it.
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

// Its name() is "host-staged(<host>)". Throws InvalidArgumentError naming
// make_host_staged_backend for a null `host`.
std::shared_ptr<CollectiveBackend> make_host_staged_backend(
    std::shared_ptr<CollectiveBackend> host);

}  // namespace dtensor
