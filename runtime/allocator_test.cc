#include "runtime/allocator.h"

#include <catch2/catch.hpp>

#include <cstdint>

#include "runtime/tensor.h"

using namespace dtensor;
using Catch::Message;

TEST_CASE("the allocator registry gives host memory for CPU and the GPU backend's for GPU") {
  CHECK(&allocator_for(DeviceType::kCPU) == &host_allocator());
  CHECK(allocator_for(DeviceType::kCPU).memory_space() == MemorySpace::kHost);
  CHECK(&allocator_for(DeviceType::kGPU) == &gpu_allocator());
  CHECK(allocator_for(DeviceType::kGPU).memory_space() == MemorySpace::kGpu);
  CHECK(memory_space_name(MemorySpace::kHost) == "host");
  CHECK(memory_space_name(MemorySpace::kGpu) == "GPU");
}

TEST_CASE("host allocations are aligned, and storage remembers its memory space") {
  Device cpu{DeviceType::kCPU, 3};
  void* p = host_allocator().allocate(100, cpu, "test");
  CHECK(reinterpret_cast<uintptr_t>(p) % Allocator::kAlignment == 0);
  host_allocator().fill_zeros(p, 100, cpu);
  CHECK(static_cast<const unsigned char*>(p)[99] == 0);
  host_allocator().free(p, 100, cpu);

  Storage storage(host_allocator(), 10, cpu, "test");
  CHECK(storage.memory_space() == MemorySpace::kHost);
  CHECK(Storage(0).memory_space() == MemorySpace::kHost);
  for (const Tensor& t : {Tensor::empty({2}, DType::kF32, cpu), Tensor::zeros({2}, DType::kF32),
                          Tensor::shared_zeros({2}, DType::kF32, cpu), Tensor()}) {
    CHECK(t.memory_space() == MemorySpace::kHost);
  }
}

TEST_CASE("GPU memory with no GPU backend registered is an error naming the device") {
  CHECK_FALSE(gpu_backend_built());
  const Device gpu{DeviceType::kGPU, 1};
  CHECK_THROWS_MATCHES(
      Tensor::empty({2, 3}, DType::kF32, gpu), UnimplementedError,
      Message("[Tensor::empty] cannot allocate 24 bytes on GPU:1: no GPU backend is "
              "registered (build with --config=cuda, or set DTENSOR_EMULATED_GPUS=N for the "
              "emulated test device)"));
  CHECK_THROWS_MATCHES(
      Tensor::zeros({4}, DType::kF64, gpu), UnimplementedError,
      Message("[Tensor::empty] cannot allocate 32 bytes on GPU:1: no GPU backend is "
              "registered (build with --config=cuda, or set DTENSOR_EMULATED_GPUS=N for the "
              "emulated test device)"));
  CHECK_THROWS_MATCHES(
      Tensor::shared_zeros({4}, DType::kF64, Device{DeviceType::kGPU, 0}), UnimplementedError,
      Message("[Tensor::empty] cannot allocate 32 bytes on GPU:0: no GPU backend is "
              "registered (build with --config=cuda, or set DTENSOR_EMULATED_GPUS=N for the "
              "emulated test device)"));
  CHECK_THROWS_MATCHES(
      Storage(gpu_allocator(), 8, gpu, "Storage"), UnimplementedError,
      Message("[Storage] cannot allocate 8 bytes on GPU:1: no GPU backend is registered (build "
              "with --config=cuda, or set DTENSOR_EMULATED_GPUS=N for the emulated test device)"));
}

TEST_CASE("same_memory_space: CPU devices share host memory, a GPU only itself") {
  const Device cpu0{DeviceType::kCPU, 0}, cpu5{DeviceType::kCPU, 5};
  const Device gpu0{DeviceType::kGPU, 0}, gpu1{DeviceType::kGPU, 1};
  CHECK(same_memory_space(cpu0, cpu5));
  CHECK(same_memory_space(cpu5, cpu5));
  CHECK(same_memory_space(gpu1, gpu1));
  CHECK_FALSE(same_memory_space(gpu0, gpu1));
  CHECK_FALSE(same_memory_space(cpu0, gpu0));
  CHECK_FALSE(same_memory_space(gpu0, cpu0));
}
