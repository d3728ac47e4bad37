#include "runtime/gpu_backend.h"

#include <atomic>

#include "runtime/error.h"

namespace dtensor {
namespace {

// The allocator of an empty slot: every request fails with an error naming the device, so a GPU
// tensor cannot be created by accident and then run on host memory.
class NoGpuAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kGpu; }
  void* allocate(size_t nbytes, const Device& device, const char* function) override {
    throw_error<UnimplementedError>(
        function,
        "cannot allocate {} bytes on {}: no GPU backend is registered (build with --config=cuda, "
        "or set DTENSOR_EMULATED_GPUS=N for the emulated test device)",
        nbytes, device_to_string(device));
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

// Constant-initialized, so a registration from any static initializer finds it.
std::atomic<const GpuBackend*> slot{nullptr};

}  // namespace

void register_gpu_backend(const GpuBackend& backend) {
  if (backend.allocator == nullptr) {
    throw_error<InvalidArgumentError>("register_gpu_backend", "backend {} has no allocator",
                                      backend.name);
  }
  const GpuBackend* current = slot.load();
  if (current != nullptr && current->test_double && !backend.test_double) return;
  slot.store(new GpuBackend(backend));  // never freed: tensors may outlive main
}

const GpuBackend* registered_gpu_backend() { return slot.load(); }

bool same_physical_gpu(const Device& a, const Device& b) {
  const GpuBackend* backend = slot.load();
  if (a.type != DeviceType::kGPU || b.type != DeviceType::kGPU || backend == nullptr ||
      backend->physical_gpu_of == nullptr) {
    return false;
  }
  return backend->physical_gpu_of(a) == backend->physical_gpu_of(b);
}

Allocator& gpu_allocator() {
  if (const GpuBackend* backend = slot.load()) return *backend->allocator;
  static auto* none = new NoGpuAllocator;
  return *none;
}

bool gpu_backend_built() { return slot.load() != nullptr; }

}  // namespace dtensor
