// The CUDA GPU backend (runtime/gpu_backend.h): its allocator and its registration.
//
// cuda_allocator.cc (target :gpu_allocator, linked into //runtime:tensor by a --config=cuda
// build) registers the allocator alone, before main, if the slot is still empty. The in-process
// GPU collectives cannot live in that target (they need //runtime:tensor: a cycle), so
// :cuda_backend_collectives registers the backend again with them as its make_collectives. The
// backend registry then uses them for GPU meshes by default, and Runtime::init under mpirun
// composes them with the host-staged MPI backend, as for the emulated GPU; a program that
// registers NCCL replaces that. Either static initializer may run first: the allocator's own
// registration never replaces one already made.
//
// Ownership: the allocator lives for the whole process. Thread-safety: register before GPU work.
#pragma once

#include <memory>

#include "runtime/allocator.h"

namespace dtensor {
class CollectiveBackend;  // runtime/collective_backend.h
}  // namespace dtensor

namespace dtensor::cuda {

// The process's one CUDA allocator (stream-ordered pools; never destroyed).
Allocator& cuda_allocator();

// Fills the GPU backend slot with the CUDA allocator and `make_collectives` (null: none).
void register_cuda_backend(std::shared_ptr<CollectiveBackend> (*make_collectives)());

}  // namespace dtensor::cuda
