// The GPU backend slot: which implementation of GPU memory (and of GPU collectives) this process
// uses, chosen at start-up by registration instead of by link-time symbol replacement.
//
// Exactly one GPU backend may be active in a process:
//   - the CUDA runtime (runtime/cuda/cuda_allocator.cc) registers itself from a static
//     initializer wherever it is linked (a --config=cuda build, GPU tests of the default build);
//   - the emulated GPU (runtime/emulated/), a test double with opaque host memory, registers
//     itself when DTENSOR_EMULATED_GPUS=N is set (see runtime/emulated/emulated_gpu.h).
// A test double takes the slot from a real backend, never the other way round, so the order of
// static initializers does not matter. With the slot empty, gpu_allocator() is an allocator whose
// every allocation throws UnimplementedError "[function] cannot allocate N bytes on GPU:1: no GPU
// backend is registered (...)", the one error of a GPU path in a CPU-only build.
//
// Ownership: registered backends live for the whole process (never destroyed). Thread-safety:
// register from static initializers or before any GPU work starts; reading is lock-free.
#pragma once

#include <memory>
#include <string_view>

#include "runtime/allocator.h"

namespace dtensor {

class CollectiveBackend;  // runtime/collective_backend.h

struct GpuBackend {
  std::string_view name;           // "CUDA", "emulated"; for messages
  Allocator* allocator = nullptr;  // GPU memory; must outlive the process's tensors
  // The intra-process collectives of GPU meshes, installed by the backend registry
  // (runtime/backend_registry.h) as its GPU default; null if the backend registers them itself.
  std::shared_ptr<CollectiveBackend> (*make_collectives)() = nullptr;
  bool test_double = false;  // an emulation that replaces a real backend in tests
  // The physical GPU that a logical GPU device runs on (runtime/cuda/gpu_devices.h); read by
  // same_physical_gpu (runtime/device.h).
  int (*physical_gpu_of)(const Device& device) = nullptr;
};

// Fills the slot (see above for which registration wins). `backend.allocator` must not be null.
void register_gpu_backend(const GpuBackend& backend);
// The registered backend, or null.
const GpuBackend* registered_gpu_backend();

}  // namespace dtensor
