#include "runtime/emulated/emulated_gpu.h"

#include <catch2/catch.hpp>

#include <cstring>

#include "runtime/backend_registry.h"
#include "runtime/emulated/opaque_memory.h"
#include "runtime/emulated/segfault_probe.h"
#include "runtime/emulated/transfer.h"
#include "runtime/gpu_backend.h"
#include "runtime/tensor.h"

using namespace dtensor;
using Catch::Message;

namespace {

Tensor host_iota(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

}  // namespace

TEST_CASE("off until enabled: a GPU allocation names the switch") {
  // This binary does not set DTENSOR_EMULATED_GPUS, so nothing registered a GPU backend.
  REQUIRE_FALSE(emulated::enabled());
  CHECK_FALSE(gpu_backend_built());
  CHECK(registered_gpu_backend() == nullptr);
  CHECK_THROWS_MATCHES(
      Tensor::empty({2, 3}, DType::kF32, Device{DeviceType::kGPU, 1}), UnimplementedError,
      Message("[Tensor::empty] cannot allocate 24 bytes on GPU:1: no GPU backend is registered "
              "(build with --config=cuda, or set DTENSOR_EMULATED_GPUS=N for the emulated test "
              "device)"));
  CHECK_THROWS_MATCHES(emulated::to_device(host_iota(2), Device{DeviceType::kGPU, 0}),
                       UnimplementedError,
                       Message("[to_device] GPU:0 is not an emulated GPU device: the emulated GPU "
                               "is off (set DTENSOR_EMULATED_GPUS=N)"));
  CHECK_THROWS_MATCHES(emulated::enable(0), InvalidArgumentError,
                       Message("[emulated::enable] 0 is not a GPU count (1 to 64)"));
}

TEST_CASE("opaque memory: page-aligned, no host access outside a window") {
  void* p = emulated::allocate_opaque(100);
  CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  CHECK(emulated::is_opaque(p));
  CHECK(emulated::is_opaque(static_cast<char*>(p) + 99));
  CHECK_FALSE(emulated::is_open(p));
  int host = 0;
  CHECK_FALSE(emulated::is_opaque(&host));
  {
    emulated::OpenWindow outer({p, &host});
    std::memset(p, 7, 100);  // readable and writable inside
    {
      emulated::OpenWindow inner({static_cast<char*>(p) + 50});
      CHECK(emulated::is_open(p));
    }
    CHECK(emulated::is_open(p));  // counted: the inner window's end leaves the outer one open
  }
  CHECK_FALSE(emulated::is_open(p));
  const emulated::ProbeResult read = emulated::run_in_child([p] {
    volatile const char* bytes = static_cast<const char*>(p);
    static_cast<void>(bytes[3]);
  });
  CHECK(read.segfault);
  INFO(read.what);
  const emulated::ProbeResult write =
      emulated::run_in_child([p] { static_cast<volatile char*>(p)[0] = 1; });
  CHECK(write.segfault);
  const emulated::ProbeResult inside = emulated::run_in_child([p] {
    emulated::OpenWindow window({p});
    if (static_cast<volatile const char*>(p)[3] != 7) throw 1;
  });
  CHECK(inside.what == "exited 0");
  emulated::free_opaque(p);
  CHECK_FALSE(emulated::is_opaque(p));
}

TEST_CASE("enabled: GPU tensors live in opaque memory; transfers, clones and streams work") {
  emulated::enable(2);
  REQUIRE(gpu_backend_built());
  CHECK(registered_gpu_backend()->name == "emulated");
  CHECK(registered_gpu_backend()->test_double);
  const Device gpu3{DeviceType::kGPU, 3}, gpu1{DeviceType::kGPU, 1}, gpu0{DeviceType::kGPU, 0};
  CHECK(emulated::physical_gpu_count() == 2);
  CHECK(emulated::physical_gpu_of(gpu3) == 1);

  const Tensor host = host_iota(1000);
  const int64_t before = emulated::activate(gpu1, "test").launches.load();
  Tensor g = emulated::to_device(host, gpu3);
  CHECK(emulated::activate(gpu1, "test").launches.load() == before + 2);  // the copy, this call
  CHECK(g.device() == gpu3);
  CHECK(g.memory_space() == MemorySpace::kGpu);
  CHECK(emulated::is_opaque(g.raw_data()));
  CHECK_FALSE(emulated::is_open(g.raw_data()));
  CHECK(emulated::run_in_child([&g] {
          volatile const float* host_view = g.data<float>();  // the host read of a shard
          static_cast<void>(host_view[5]);
        }).segfault);

  CHECK(bitwise_equal(emulated::to_host(g), host));
  CHECK(emulated::to_device(g, gpu1).shares_storage_with(g));    // same physical GPU: retagged
  const Tensor peer = emulated::to_device(g, gpu0);               // other GPU: a copy
  CHECK_FALSE(peer.shares_storage_with(g));
  CHECK(bitwise_equal(emulated::to_host(peer), host));
  CHECK(bitwise_equal(emulated::to_host(g.clone()), host));
  CHECK(bitwise_equal(emulated::to_host(Tensor::zeros({1000}, DType::kF32, gpu0)),
                      Tensor::zeros({1000}, DType::kF32)));
  CHECK(emulated::to_host(host).is_same_as(host));
  CHECK_THROWS_MATCHES(emulated::to_device(host, Device{DeviceType::kCPU, 0}),
                       InvalidArgumentError, Message("[to_device] CPU:0 is not a GPU device"));
  CHECK(emulated::to_host(Tensor::empty({0}, DType::kF32, gpu0)).num_elements() == 0);
}

TEST_CASE("enabled: the emulated backend owns the GPU collectives, also after a reset") {
  emulated::enable(1);
  CHECK(collective_backend_for(DeviceType::kGPU, false, "x=2", "all_reduce").name() ==
        "in-process emulated GPU");
  reset_collective_backends();
  CHECK(collective_backend_for(DeviceType::kGPU, false, "x=2", "all_reduce").name() ==
        "in-process emulated GPU");
  // A real backend registering later does not take the slot from the test double.
  static HostAllocator other;
  register_gpu_backend(GpuBackend{"CUDA", &other, nullptr, false});
  CHECK(registered_gpu_backend()->name == "emulated");
}

TEST_CASE("a bad DTENSOR_EMULATED_GPUS is reported by the first GPU allocation", "[.bad_switch]") {
  REQUIRE(gpu_backend_built());
  CHECK_FALSE(emulated::enabled());
  CHECK_THROWS_MATCHES(Tensor::empty({2}, DType::kF32, Device{DeviceType::kGPU, 0}),
                       UnimplementedError,
                       Message("[Tensor::empty] GPU:0 is not an emulated GPU device: "
                               "[DTENSOR_EMULATED_GPUS] 'many' is not a GPU count (1 to 64)"));
}
