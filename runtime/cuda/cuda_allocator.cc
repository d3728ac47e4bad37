// The GPU allocator of a CUDA build: stream-ordered allocations (cudaMallocAsync) from each
// physical GPU's default memory pool, whose release threshold gpu_devices.cc raises so that freed
// blocks stay cached in the pool. A free is ordered after the work already issued on the device's
// stream, and the next allocation on that stream reuses the block without a device sync: the same
// reuse a caching allocator gives, kept by the driver. An allocation that fails returns the
// pool's cached blocks to the driver (cudaMemPoolTrimTo) and tries once more before it throws.
#include "runtime/cuda/cuda_allocator.h"

#include "runtime/gpu_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"

namespace dtensor {
namespace {

class CudaAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kGpu; }

  void* allocate(size_t nbytes, const Device& device, const char* function) override {
    cudaStream_t stream = cuda::activate(device, function);
    void* data = nullptr;
    // Pool blocks are at least 256-byte aligned, more than kAlignment.
    const size_t size = nbytes == 0 ? kAlignment : nbytes;
    cudaError_t status = cudaMallocAsync(&data, size, stream);
    if (status == cudaErrorMemoryAllocation) {
      // The pool keeps freed blocks (gpu_devices.cc): give them back to the driver, try again.
      cudaGetLastError();
      cuda::release_cached_memory(device, function);
      status = cudaMallocAsync(&data, size, stream);
    }
    cuda::check_cuda(status, "cudaMallocAsync", function, &device);
    return data;
  }

  void free(void* data, size_t, const Device& device) noexcept override {
    try {
      cudaFreeAsync(data, cuda::activate(device, "free"));
    } catch (...) {
      // Only reachable during a failing shutdown; the pool goes with the process.
    }
  }

  void fill_zeros(void* data, size_t nbytes, const Device& device) override {
    cudaStream_t stream = cuda::activate(device, "fill_zeros");
    cuda::check_cuda(cudaMemsetAsync(data, 0, nbytes, stream), "cudaMemsetAsync", "fill_zeros",
                     &device);
  }

  void copy(void* dst, const void* src, size_t nbytes, const Device& device) override {
    cudaStream_t stream = cuda::activate(device, "copy");
    cuda::check_cuda(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream),
                     "cudaMemcpyAsync", "copy", &device);
  }
};

}  // namespace

namespace cuda {

Allocator& cuda_allocator() {
  static auto* allocator = new CudaAllocator;
  return *allocator;
}

void register_cuda_backend(std::shared_ptr<CollectiveBackend> (*make_collectives)()) {
  register_gpu_backend(
      GpuBackend{"CUDA", &cuda_allocator(), make_collectives, false, cuda::physical_gpu_of});
}

}  // namespace cuda

namespace {

// Fills the GPU backend slot (runtime/gpu_backend.h) before main wherever this file is linked,
// unless :cuda_backend_collectives already filled it (cuda_allocator.h).
[[maybe_unused]] const bool registered = [] {
  if (registered_gpu_backend() == nullptr) cuda::register_cuda_backend(nullptr);
  return true;
}();

}  // namespace

}  // namespace dtensor
