// host_readable and on_device (dtensor/host_copy.h): no copy for host memory, one transfer through
// the GPU table for device memory (opaque pages, dtensor/opaque_memory_testing.h, so a host read
// on the way would crash), and the front's error without a GPU backend.
#include "dtensor/host_copy.h"

#include <catch2/catch.hpp>

#include "dtensor/opaque_memory_testing.h"

using namespace dtensor;
using namespace dtensor::testing;

namespace {

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
