// A test double for device memory, for tests of host reads above the kernel front: tensors whose
// bytes the host cannot touch (pages mapped PROT_NONE), and the GPU table's transfer entries
// (kernels/gpu/gpu_kernels.h copy_to_gpu, copy_to_host) replaced, for one test, by copies that
// open the pages only while they run and count themselves. A host read of such a tensor outside
// a transfer crashes the test. Not thread-safe: one test at a time.
#pragma once

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "kernels/gpu/gpu_kernels.h"
#include "runtime/tensor.h"

namespace dtensor::testing {

inline constexpr size_t kPage = 4096;

inline size_t mapped_size(size_t nbytes) { return (nbytes + kPage - 1) / kPage * kPage + kPage; }

// Device memory the host cannot touch: mapped with no access.
class OpaqueAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kGpu; }
  void* allocate(size_t nbytes, const Device&, const char*) override {
    void* p = mmap(nullptr, mapped_size(nbytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    return p;
  }
  void free(void* data, size_t nbytes, const Device&) noexcept override {
    munmap(data, mapped_size(nbytes));
  }
  void fill_zeros(void*, size_t, const Device&) override {}
  void copy(void*, const void*, size_t, const Device&) override {}
};

inline OpaqueAllocator opaque;
// Transfers made since the last TransferEntries was set up.
inline int transfers = 0;

// `nbytes` at `data` readable and writable while `f` runs.
template <typename F>
inline void unprotected(const void* data, size_t nbytes, const F& f) {
  void* page = const_cast<void*>(data);
  REQUIRE(mprotect(page, mapped_size(nbytes), PROT_READ | PROT_WRITE) == 0);
  f();
  REQUIRE(mprotect(page, mapped_size(nbytes), PROT_NONE) == 0);
}

inline Tensor opaque_copy_to_gpu(const Tensor& host, const Device& device) {
  ++transfers;
  auto storage = std::make_shared<Storage>(opaque, host.nbytes(), device, "copy_to_gpu");
  Tensor out(host.shape(), host.dtype(), device, storage);
  unprotected(out.raw_data(), out.nbytes(),
              [&] { std::memcpy(out.raw_data(), host.raw_data(), host.nbytes()); });
  return out;
}

inline Tensor opaque_copy_to_host(const Tensor& t) {
  ++transfers;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  unprotected(t.raw_data(), t.nbytes(),
              [&] { std::memcpy(out.raw_data(), t.raw_data(), t.nbytes()); });
  return out;
}

// The GPU table's transfer entries replaced by the opaque ones (or emptied, `present` false) for
// the life of this object; the counter restarts at 0.
class TransferEntries {
 public:
  explicit TransferEntries(bool present)
      : to_gpu_(kernels::gpu::registered_table.copy_to_gpu),
        to_host_(kernels::gpu::registered_table.copy_to_host) {
    kernels::gpu::registered_table.copy_to_gpu = present ? opaque_copy_to_gpu : nullptr;
    kernels::gpu::registered_table.copy_to_host = present ? opaque_copy_to_host : nullptr;
    transfers = 0;
  }
  ~TransferEntries() {
    kernels::gpu::registered_table.copy_to_gpu = to_gpu_;
    kernels::gpu::registered_table.copy_to_host = to_host_;
  }

 private:
  decltype(kernels::gpu::Table::copy_to_gpu) to_gpu_;
  decltype(kernels::gpu::Table::copy_to_host) to_host_;
};

}  // namespace dtensor::testing
