// A test double for device memory, for tests of host reads above the kernel front: tensors whose
// bytes the host cannot touch (pages mapped PROT_NONE), and the GPU table's transfer entries
// (kernels/gpu/gpu_kernels.h copy_to_gpu, copy_to_host) replaced, for one test, by copies that
// open the pages only while they run and count themselves, and optionally a few kernels (reduce,
// binary, cast: the CPU kernels run while their inputs' pages are open). A host read of such a
// tensor outside a transfer or kernel crashes the test. Not thread-safe: one test at a time. The
// emulated GPU device (issue 27, item 1) is the full version of this.
#pragma once

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernels.h"
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

// A host tensor's elements in new opaque memory on `device`.
inline Tensor opaque_from_host(const Tensor& host, const Device& device) {
  auto storage = std::make_shared<Storage>(opaque, host.nbytes(), device, "copy_to_gpu");
  Tensor out(host.shape(), host.dtype(), device, storage);
  unprotected(out.raw_data(), out.nbytes(),
              [&] { std::memcpy(out.raw_data(), host.raw_data(), host.nbytes()); });
  return out;
}

inline Tensor opaque_copy_to_gpu(const Tensor& host, const Device& device) {
  ++transfers;
  return opaque_from_host(host, device);
}

inline Tensor opaque_copy_to_host(const Tensor& t) {
  ++transfers;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  unprotected(t.raw_data(), t.nbytes(),
              [&] { std::memcpy(out.raw_data(), t.raw_data(), t.nbytes()); });
  return out;
}

// A kernel on opaque memory: the CPU kernel `f` run on CPU-tagged handles of `inputs` while their
// pages are open, its result put in opaque memory on the first input's device.
template <typename F>
inline Tensor opaque_kernel(std::initializer_list<const Tensor*> inputs, const F& f) {
  const auto set = [&](int protection) {
    for (const Tensor* t : inputs) {
      REQUIRE(mprotect(const_cast<void*>(t->raw_data()), mapped_size(t->nbytes()), protection) ==
              0);
    }
  };
  set(PROT_READ | PROT_WRITE);
  const Tensor host = f(Device{DeviceType::kCPU, 0});
  set(PROT_NONE);
  return opaque_from_host(host, (*inputs.begin())->device());
}

inline Tensor opaque_reduce(kernels::ReduceKind kind, const Tensor& x,
                            const std::vector<int64_t>& axes, bool keepdims) {
  return opaque_kernel({&x}, [&](const Device& cpu) {
    return kernels::reduce(kind, x.with_device(cpu), axes, keepdims);
  });
}

inline Tensor opaque_binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b) {
  return opaque_kernel({&a, &b}, [&](const Device& cpu) {
    return kernels::binary(op, a.with_device(cpu), b.with_device(cpu));
  });
}

inline Tensor opaque_cast(const Tensor& x, DType dtype) {
  return opaque_kernel({&x}, [&](const Device& cpu) { return kernels::cast(x.with_device(cpu), dtype); });
}

// The GPU table's transfer entries replaced by the opaque ones (or emptied, `present` false), and
// with `with_kernels` the reduce, binary and cast kernels by opaque ones and every other entry
// emptied, for the life of this object. The transfer counter restarts at 0.
class TransferEntries {
 public:
  explicit TransferEntries(bool present, bool with_kernels = false)
      : saved_(kernels::gpu::registered_table) {
    // With kernels, no other entry (a CUDA build's): every other kernel throws the front's error.
    kernels::gpu::Table table = with_kernels ? kernels::gpu::Table{} : saved_;
    table.copy_to_gpu = present ? opaque_copy_to_gpu : nullptr;
    table.copy_to_host = present ? opaque_copy_to_host : nullptr;
    if (with_kernels) {
      table.reduce = opaque_reduce;
      table.binary = opaque_binary;
      table.cast = opaque_cast;
    }
    kernels::gpu::registered_table = table;
    transfers = 0;
  }
  ~TransferEntries() { kernels::gpu::registered_table = saved_; }
  TransferEntries(const TransferEntries&) = delete;
  TransferEntries& operator=(const TransferEntries&) = delete;

 private:
  kernels::gpu::Table saved_;
};

}  // namespace dtensor::testing
