#include "runtime/emulated/transfer.h"

#include <atomic>
#include <cstring>

#include "runtime/emulated/emulated_gpu.h"
#include "runtime/emulated/opaque_memory.h"

namespace dtensor::emulated {
namespace {

std::atomic<int64_t> host_transfer_count{0};

}  // namespace

int64_t host_transfers() { return host_transfer_count.load(); }

void copy_to_device(void* dst, const void* src, size_t nbytes, const Device& device) {
  activate(device, "to_device");
  OpenWindow window({dst, src});  // `src` is host memory, or another emulated GPU's (a peer copy)
  std::memcpy(dst, src, nbytes);
}

void copy_to_host(void* host_dst, const void* src, size_t nbytes, const Device& device) {
  activate(device, "to_host");
  OpenWindow window({src});
  std::memcpy(host_dst, src, nbytes);
}

Tensor to_device(const Tensor& tensor, const Device& device) {
  require_gpu(device, "to_device");
  const bool from_gpu = tensor.device().type == DeviceType::kGPU;
  if (from_gpu && physical_gpu_of(tensor.device()) == physical_gpu_of(device)) {
    return tensor.with_device(device);
  }
  if (from_gpu) activate(tensor.device(), "to_device");  // a peer copy: both streams see it
  if (!from_gpu) ++host_transfer_count;
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), device);
  copy_to_device(out.raw_data(), tensor.raw_data(), tensor.nbytes(), device);
  return out;
}

Tensor to_host(const Tensor& tensor) {
  if (tensor.device().type == DeviceType::kCPU) return tensor;
  ++host_transfer_count;
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), Device{});
  copy_to_host(out.raw_data(), tensor.raw_data(), tensor.nbytes(), tensor.device());
  return out;
}

}  // namespace dtensor::emulated
