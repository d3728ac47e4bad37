#include "runtime/cuda/transfer.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"

namespace dtensor::cuda {
namespace {

// Large enough to keep the copy engine busy, small enough to stay pinned for the process's life.
constexpr size_t kStagingBytes = size_t{8} << 20;

struct Staging {
  std::mutex mu;
  void* buffer = nullptr;
};

Staging& staging_for(const Device& device, const char* function) {
  static auto* all = new std::vector<std::unique_ptr<Staging>>(
      static_cast<size_t>(std::max(1, physical_gpu_count())));
  static std::mutex create_mu;
  const size_t gpu = static_cast<size_t>(physical_gpu_of(device));
  std::lock_guard<std::mutex> lock(create_mu);
  auto& slot = (*all)[gpu];
  if (!slot) {
    auto s = std::make_unique<Staging>();
    check_cuda(cudaMallocHost(&s->buffer, kStagingBytes), "cudaMallocHost", function, &device);
    slot = std::move(s);
  }
  return *slot;
}

}  // namespace

void copy_to_device(void* dst, const void* host_src, size_t nbytes, const Device& device) {
  const char* fn = "to_device";
  cudaStream_t stream = activate(device, fn);
  Staging& staging = staging_for(device, fn);
  std::lock_guard<std::mutex> lock(staging.mu);
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, nbytes - done);
    // The previous chunk must have left the buffer before it is refilled.
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
    std::memcpy(staging.buffer, static_cast<const char*>(host_src) + done, n);
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + done, staging.buffer, n,
                               cudaMemcpyHostToDevice, stream),
               "cudaMemcpyAsync", fn, &device);
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
}

void copy_to_host(void* host_dst, const void* src, size_t nbytes, const Device& device) {
  const char* fn = "to_host";
  cudaStream_t stream = activate(device, fn);
  Staging& staging = staging_for(device, fn);
  std::lock_guard<std::mutex> lock(staging.mu);
  if (nbytes == 0) {
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
  }
  for (size_t done = 0; done < nbytes; done += kStagingBytes) {
    const size_t n = std::min(kStagingBytes, nbytes - done);
    check_cuda(cudaMemcpyAsync(staging.buffer, static_cast<const char*>(src) + done, n,
                               cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync", fn, &device);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
    std::memcpy(static_cast<char*>(host_dst) + done, staging.buffer, n);
  }
}

Tensor to_device(const Tensor& host, const Device& device) {
  if (device.type != DeviceType::kGPU) {
    throw_error<InvalidArgumentError>("to_device", "{} is not a GPU device",
                                      device_to_string(device));
  }
  if (host.device().type == DeviceType::kGPU) {
    if (physical_gpu_of(host.device()) == physical_gpu_of(device)) return host.with_device(device);
    Tensor out = Tensor::empty(host.shape(), host.dtype(), device);
    synchronize(host.device(), "to_device");
    activate(device, "to_device");
    check_cuda(cudaMemcpyPeer(out.raw_data(), physical_gpu_of(device), host.raw_data(),
                              physical_gpu_of(host.device()), host.nbytes()),
               "cudaMemcpyPeer", "to_device", &device);
    return out;
  }
  Tensor out = Tensor::empty(host.shape(), host.dtype(), device);
  copy_to_device(out.raw_data(), host.raw_data(), host.nbytes(), device);
  return out;
}

Tensor to_host(const Tensor& tensor) {
  if (tensor.device().type == DeviceType::kCPU) return tensor;
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), Device{});
  copy_to_host(out.raw_data(), tensor.raw_data(), tensor.nbytes(), tensor.device());
  return out;
}

}  // namespace dtensor::cuda
