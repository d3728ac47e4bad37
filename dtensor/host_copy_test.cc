// host_readable and on_device (dtensor/host_copy.h) on host memory: no copy, and the front's
// error for a GPU device without a GPU backend. Their transfers of device memory, counted on
// opaque pages, are tested on the emulated GPU (tests/emulated_gpu:host_reads_test).
#include "dtensor/host_copy.h"

#include <catch2/catch.hpp>

using namespace dtensor;

namespace {

Tensor host_values() {
  Tensor t = Tensor::empty({3}, DType::kI32);
  for (int32_t i = 0; i < 3; ++i) t.data<int32_t>()[i] = 7 * i - 1;
  return t;
}

}  // namespace

TEST_CASE("host_readable and on_device move nothing for host memory") {
  Tensor t = host_values();
  CHECK(host_readable(t).shares_storage_with(t));
  Tensor on_cpu3 = on_device(t, Device{DeviceType::kCPU, 3});
  CHECK(on_cpu3.shares_storage_with(t));
  CHECK(on_cpu3.device() == Device{DeviceType::kCPU, 3});
}

TEST_CASE("on_device onto a GPU without a GPU backend names the transfer") {
  CHECK_THROWS_MATCHES(on_device(host_values(), Device{DeviceType::kGPU, 0}), UnimplementedError,
                       Catch::Message("[copy_to_gpu] has no GPU kernel in this build"));
}
