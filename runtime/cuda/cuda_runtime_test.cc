// GPU memory, streams and transfers (skips with one line without a GPU: gpu_test_main.cc).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "runtime/collective_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"
#include "runtime/gpu_backend.h"
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

// Whichever of the two static initializers ran first (cuda_allocator.h), the slot ends up with
// the collectives, which Runtime::init composes with the host-staged MPI backend under mpirun.
TEST_CASE("the CUDA backend brings the in-process GPU collectives", "[host]") {
  const GpuBackend* backend = registered_gpu_backend();
  REQUIRE(backend != nullptr);
  CHECK(backend->name == "CUDA");
  CHECK_FALSE(backend->test_double);
  REQUIRE(backend->make_collectives != nullptr);
  CHECK(backend->make_collectives()->name() == "in-process GPU");
}

TEST_CASE("logical GPU devices map onto the physical GPUs round-robin") {
  const int count = cuda::physical_gpu_count();
  REQUIRE(count > 0);
  for (int64_t id = 0; id < 16; ++id) {
    CHECK(cuda::physical_gpu_of(Device{DeviceType::kGPU, id}) == static_cast<int>(id % count));
  }
}

TEST_CASE("processes on one node split its GPUs by node-local rank", "[host]") {
  // One process: round-robin over every GPU (0 GPUs: 0).
  CHECK(cuda::physical_gpu_for(5, 4, 0, 1) == 1);
  CHECK(cuda::physical_gpu_for(5, 0, 0, 1) == 0);
  // Two processes, four GPUs: 0 and 2 for local rank 0, 1 and 3 for local rank 1, whatever the
  // global ids (process 1 of a batch=4 mesh owns ids 2 and 3).
  for (int64_t id : {0, 1, 2, 3}) {
    CHECK(cuda::physical_gpu_for(id, 4, 0, 2) == (id % 2 == 0 ? 0 : 2));
    CHECK(cuda::physical_gpu_for(id, 4, 1, 2) == (id % 2 == 0 ? 1 : 3));
  }
  // Ranks placed round-robin over nodes (one device each, ids 0 and 2 on one node) do not meet
  // on GPU 0 as id % count would put them.
  CHECK(cuda::physical_gpu_for(0, 2, 0, 2) != cuda::physical_gpu_for(2, 2, 1, 2));
  // Each process sees only its own GPU (CUDA_VISIBLE_DEVICES), or there are fewer GPUs than
  // processes: they use what they see, sharing.
  CHECK(cuda::physical_gpu_for(3, 1, 1, 2) == 0);
  CHECK(cuda::physical_gpu_for(7, 3, 4, 8) == 1);
  // Three GPUs for two processes: rank 0 takes 0 and 2, rank 1 takes 1.
  CHECK(cuda::physical_gpu_for(1, 3, 0, 2) == 2);
  CHECK(cuda::physical_gpu_for(1, 3, 1, 2) == 1);
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

TEST_CASE("a peer copy sees the source's queued writes, and the source may be freed at once") {
  if (cuda::physical_gpu_count() < 2) return;  // one GPU: logical devices share it, no peer copy
  const Device gpu0{DeviceType::kGPU, 0}, gpu1{DeviceType::kGPU, 1};
  const Shape shape{1 << 22};
  for (int round = 0; round < 8; ++round) {
    // The zero fill is queued on GPU 0's stream; the copy must wait for it, and must have read the
    // block before GPU 0 reuses it for the next tensor (written with other values).
    Tensor src = Tensor::zeros(shape, DType::kF32, gpu0);
    Tensor copy = cuda::to_device(src, gpu1);
    src = Tensor();
    Tensor reuse = cuda::to_device(host_iota(shape), gpu0);
    CHECK(bitwise_equal(cuda::to_host(copy), Tensor::zeros(shape, DType::kF32)));
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
