#include "runtime/allocator.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace dtensor {

std::string_view memory_space_name(MemorySpace space) {
  return space == MemorySpace::kHost ? "host" : "GPU";
}

void* HostAllocator::allocate(size_t nbytes, const Device&, const char*) {
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (data == nullptr) throw std::bad_alloc();
  return data;
}

void HostAllocator::free(void* data, size_t, const Device&) noexcept { std::free(data); }

void HostAllocator::fill_zeros(void* data, size_t nbytes, const Device&) {
  std::memset(data, 0, nbytes);
}

void HostAllocator::copy(void* dst, const void* src, size_t nbytes, const Device&) {
  std::memcpy(dst, src, nbytes);
}

HostAllocator& host_allocator() {
  // Never destroyed: storage in static objects may be released during exit.
  static auto* allocator = new HostAllocator;
  return *allocator;
}

}  // namespace dtensor
