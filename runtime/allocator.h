// Allocator: where the bytes of a Storage come from, one per device type.
//
// An Allocator hands out and takes back raw, kAlignment-aligned bytes in one memory space (host
// memory, or the memory of one GPU). Tensor::empty/zeros/shared_zeros pick the allocator of the
// tensor's device type through allocator_for(); host memory additionally goes through
// BufferPool::global(), which caches freed buffers. A Storage remembers the allocator it came
// from and gives its bytes back to it.
//
// Which GPU allocator exists is chosen by registration, not by #ifdefs or weak symbols: the GPU
// backend slot (runtime/gpu_backend.h) holds the CUDA runtime's or the emulated GPU's; with the
// slot empty, gpu_allocator()'s allocate() throws.
//
// Ownership: allocators are process-wide singletons that are never destroyed (storage may be
// released during exit). Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/device.h"

namespace dtensor {

// Host memory is one space shared by every CPU device of a process; each GPU has its own.
enum class MemorySpace : uint8_t { kHost, kGpu };

// "host" or "GPU", for messages.
std::string_view memory_space_name(MemorySpace space);

// The memory space that tensors on devices of `type` live in.
constexpr MemorySpace memory_space_of(DeviceType type) {
  return type == DeviceType::kCPU ? MemorySpace::kHost : MemorySpace::kGpu;
}

class Allocator {
 public:
  // Every allocation is aligned to this many bytes (a cache line, and enough for AVX-512).
  static constexpr size_t kAlignment = 64;

  virtual ~Allocator() = default;

  virtual MemorySpace memory_space() const = 0;
  // At least `nbytes` bytes (0 is allowed) aligned to kAlignment, in the memory of `device`.
  // Throws std::bad_alloc when memory runs out, and UnimplementedError naming `function` and the
  // device when this build cannot reach that kind of memory at all.
  virtual void* allocate(size_t nbytes, const Device& device, const char* function) = 0;
  // Returns what allocate(nbytes, device) gave.
  virtual void free(void* data, size_t nbytes, const Device& device) noexcept = 0;
  // Byte-level helpers for memory the host cannot touch directly: zero `nbytes` at `data`, and
  // copy `nbytes` between two buffers of this space (Tensor::zeros and Tensor::clone).
  virtual void fill_zeros(void* data, size_t nbytes, const Device& device) = 0;
  virtual void copy(void* dst, const void* src, size_t nbytes, const Device& device) = 0;
};

// Aligned host memory (aligned_alloc / free). Final, so calls through it are direct.
class HostAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  void* allocate(size_t nbytes, const Device& device, const char* function) override;
  void free(void* data, size_t nbytes, const Device& device) noexcept override;
  void fill_zeros(void* data, size_t nbytes, const Device& device) override;
  void copy(void* dst, const void* src, size_t nbytes, const Device& device) override;
};

HostAllocator& host_allocator();
// The registered GPU backend's allocator (runtime/gpu_backend.h), or one that throws.
Allocator& gpu_allocator();

// The allocator for memory of `type`: a switch, no lookup.
inline Allocator& allocator_for(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return host_allocator();
    case DeviceType::kGPU:
      break;
  }
  return gpu_allocator();
}

}  // namespace dtensor
