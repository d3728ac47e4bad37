// The GPU allocator of a build without CUDA: every request fails with an error naming the device,
// so a GPU tensor cannot be created by accident and then run on host memory.
#include "runtime/allocator.h"
#include "runtime/error.h"

namespace dtensor {
namespace {

class NoGpuAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kGpu; }
  void* allocate(size_t nbytes, const Device& device, const char* function) override {
    throw_error<UnimplementedError>(
        function, "cannot allocate {} bytes on {}: this binary was built without CUDA", nbytes,
        device_to_string(device));
  }
  // Nothing can have been allocated, so nothing reaches these.
  void free(void*, size_t, const Device&) noexcept override {}
  void fill_zeros(void*, size_t, const Device& device) override { unreachable(device); }
  void copy(void*, const void*, size_t, const Device& device) override { unreachable(device); }

 private:
  [[noreturn]] static void unreachable(const Device& device) {
    throw_error<InternalError>("gpu_allocator", "no memory on {} was ever allocated",
                               device_to_string(device));
  }
};

}  // namespace

// Weak, like kernels/no_gpu: a GPU test of the default build links
// //runtime/cuda:gpu_allocator beside this stub, and its definitions take precedence.
[[gnu::weak]] Allocator& gpu_allocator() {
  static auto* allocator = new NoGpuAllocator;
  return *allocator;
}

}  // namespace dtensor

namespace dtensor {
[[gnu::weak]] bool gpu_backend_built() { return false; }
}  // namespace dtensor
