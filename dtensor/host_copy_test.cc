// host_readable and on_device (dtensor/host_copy.h): no copy for host memory, one transfer through
// the GPU table for device memory, and the front's error without a GPU backend. The "device"
// memory here is pages the host cannot read (PROT_NONE) except inside this test's transfer
// entries, so a host read of it on the way would crash the test.
#include "dtensor/host_copy.h"

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "kernels/gpu/gpu_kernels.h"

using namespace dtensor;

namespace {

constexpr size_t kPage = 4096;

size_t mapped_size(size_t nbytes) { return (nbytes + kPage - 1) / kPage * kPage + kPage; }

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

OpaqueAllocator opaque;
int transfers = 0;

// `nbytes` at `data` readable and writable while `f` runs.
template <typename F>
void unprotected(const void* data, size_t nbytes, const F& f) {
  void* page = const_cast<void*>(data);
  REQUIRE(mprotect(page, mapped_size(nbytes), PROT_READ | PROT_WRITE) == 0);
  f();
  REQUIRE(mprotect(page, mapped_size(nbytes), PROT_NONE) == 0);
}

Tensor opaque_copy_to_gpu(const Tensor& host, const Device& device) {
  ++transfers;
  auto storage = std::make_shared<Storage>(opaque, host.nbytes(), device, "copy_to_gpu");
  Tensor out(host.shape(), host.dtype(), device, storage);
  unprotected(out.raw_data(), out.nbytes(),
              [&] { std::memcpy(out.raw_data(), host.raw_data(), host.nbytes()); });
  return out;
}

Tensor opaque_copy_to_host(const Tensor& t) {
  ++transfers;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  unprotected(t.raw_data(), t.nbytes(),
              [&] { std::memcpy(out.raw_data(), t.raw_data(), t.nbytes()); });
  return out;
}

// The GPU table's transfer entries replaced by the opaque ones (or emptied) for one test.
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

Tensor host_values() {
  Tensor t = Tensor::empty({3}, DType::kI32);
  for (int32_t i = 0; i < 3; ++i) t.data<int32_t>()[i] = 7 * i - 1;
  return t;
}

}  // namespace

TEST_CASE("host_readable and on_device move nothing for host memory") {
  TransferEntries entries(true);
  Tensor t = host_values();
  CHECK(host_readable(t).shares_storage_with(t));
  Tensor on_cpu3 = on_device(t, Device{DeviceType::kCPU, 3});
  CHECK(on_cpu3.shares_storage_with(t));
  CHECK(on_cpu3.device() == Device{DeviceType::kCPU, 3});
  CHECK(transfers == 0);
}

TEST_CASE("host_readable and on_device transfer device memory once each way") {
  TransferEntries entries(true);
  const Device gpu1{DeviceType::kGPU, 1};
  Tensor on_gpu = on_device(host_values(), gpu1);
  CHECK(transfers == 1);
  CHECK(on_gpu.memory_space() == MemorySpace::kGpu);
  CHECK(on_gpu.device() == gpu1);
  Tensor back = host_readable(on_gpu);
  CHECK(transfers == 2);
  CHECK(back.memory_space() == MemorySpace::kHost);
  CHECK(bitwise_equal(back, host_values()));
  CHECK_THROWS_MATCHES(on_device(on_gpu, gpu1), InternalError,
                       Catch::Message("[on_device] i32[3]@GPU:1 is not in host memory"));
}

TEST_CASE("host_readable of device memory without a GPU backend names the transfer") {
  Tensor on_gpu;
  {
    TransferEntries entries(true);
    on_gpu = on_device(host_values(), Device{DeviceType::kGPU, 0});
  }
  TransferEntries none(false);
  CHECK_THROWS_MATCHES(host_readable(on_gpu), UnimplementedError,
                       Catch::Message("[copy_to_host] has no GPU kernel in this build"));
  CHECK_THROWS_MATCHES(on_device(host_values(), Device{DeviceType::kGPU, 0}), UnimplementedError,
                       Catch::Message("[copy_to_gpu] has no GPU kernel in this build"));
}
