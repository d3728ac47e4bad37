// The in-process collectives of GPU meshes, written once for every GPU backend (CUDA's,
// runtime/cuda/gpu_collectives.h, and the emulated GPU's, runtime/emulated/).
//
// Every collective runs as device copies and the block kernels behind runtime/element_loops.h
// (which the kernel front sends to the GPU backend's kernels): members that sit on other physical
// GPUs are staged onto the first member's GPU (peer copies), reduced or concatenated there in the
// CPU's pairwise order (so results are bit-identical to the CPU backend's), and each member gets
// its own copy of the result (a device-to-device copy for logical devices of the same GPU, a peer
// copy otherwise). Never one shared buffer: the op layer treats shards that share storage as host
// memory it may stack rows of (ops/expand.cc), which GPU memory is not.
//
// Thread-safety: the backend is stateless; the copies are the GPU backend's.
#pragma once

#include <memory>

#include "runtime/collective_backend.h"

namespace dtensor {

// What the backend needs from a GPU runtime: where a logical device lives, and a copy of a
// tensor onto another device (host or GPU source; retags without copying on the same GPU).
struct GpuPlacement {
  int (*physical_gpu_of)(const Device& device) = nullptr;
  Tensor (*to_device)(const Tensor& tensor, const Device& device) = nullptr;
};

// `name` is the backend's name() ("in-process GPU"); it must outlive the backend.
std::shared_ptr<CollectiveBackend> make_gpu_in_process_backend(GpuPlacement placement,
                                                               std::string_view name);

}  // namespace dtensor
