// GPU memory, streams and transfers (skips with one line without a GPU: gpu_test_main.cc).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"
#include "runtime/tensor.h"

using namespace dtensor;
using Catch::Message;

namespace {
Tensor host_iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = static_cast<float>(i) * 0.5f - 3.0f;
  return t;
}
}  // namespace

TEST_CASE("a CUDA build has a GPU backend whose memory is GPU memory") {
  CHECK(gpu_backend_built());
  CHECK(gpu_allocator().memory_space() == MemorySpace::kGpu);
  Tensor t = Tensor::empty({3, 5}, DType::kF32, Device{DeviceType::kGPU, 0});
  CHECK(t.memory_space() == MemorySpace::kGpu);
  CHECK(t.device() == Device{DeviceType::kGPU, 0});
}

TEST_CASE("logical GPU devices map onto the physical GPUs round-robin") {
  const int count = cuda::physical_gpu_count();
  REQUIRE(count > 0);
  for (int64_t id = 0; id < 16; ++id) {
    CHECK(cuda::physical_gpu_of(Device{DeviceType::kGPU, id}) == static_cast<int>(id % count));
  }
}

TEST_CASE("to_device and to_host round-trip the bytes, through the staging buffer too") {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{3, 1000}, Shape{3, 1024, 1024}}) {
    Tensor host = host_iota(shape);
    for (int64_t id : {0, 5}) {
      Tensor gpu = cuda::to_device(host, Device{DeviceType::kGPU, id});
      CHECK(gpu.device() == Device{DeviceType::kGPU, id});
      Tensor back = cuda::to_host(gpu);
      CHECK(back.device().type == DeviceType::kCPU);
      CHECK(bitwise_equal(back, host));
    }
  }
}

TEST_CASE("zeros, clone and many allocations on the stream-ordered pool") {
  const Device gpu{DeviceType::kGPU, 3};
  Tensor z = Tensor::zeros({1000}, DType::kF64, gpu);
  Tensor host = cuda::to_host(z);
  for (int64_t i = 0; i < 1000; ++i) CHECK(host.data<double>()[i] == 0.0);
  Tensor a = cuda::to_device(host_iota({64, 64}), gpu);
  Tensor c = a.clone();
  CHECK_FALSE(c.shares_storage_with(a));
  CHECK(bitwise_equal(cuda::to_host(c), host_iota({64, 64})));
  // Freed blocks go back to the pool and are reused without a device sync.
  for (int i = 0; i < 1000; ++i) Tensor::empty({1 << 16}, DType::kF32, gpu);
  cuda::synchronize(gpu);
}

TEST_CASE("to_device of a CPU device id is an error naming it") {
  CHECK_THROWS_MATCHES(cuda::to_device(host_iota({2}), Device{DeviceType::kCPU, 1}),
                       InvalidArgumentError, Message("[to_device] CPU:1 is not a GPU device"));
}

TEST_CASE("CUDA failures become CudaError naming the call and CUDA's message") {
  const Device gpu{DeviceType::kGPU, 0};
  CHECK_THROWS_MATCHES(
      cuda::check_cuda(cudaErrorInvalidValue, "cudaMemcpyAsync", "copy", &gpu), cuda::CudaError,
      Message("[copy] cudaMemcpyAsync failed on GPU:0 (physical GPU 0): invalid argument"));
  CHECK_THROWS_MATCHES(cuda::check_cuda(cudaErrorInvalidValue, "cudaMemcpyAsync", "copy"),
                       cuda::CudaError, Message("[copy] cudaMemcpyAsync failed: invalid argument"));
  CHECK_THROWS_AS(cuda::check_cuda(cudaErrorMemoryAllocation, "cudaMallocAsync", "x"),
                  std::bad_alloc);
}
