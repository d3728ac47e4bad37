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

// Each staging half is large enough to keep the copy engine busy, small enough to stay pinned for
// the process's life. Two halves let the host fill (or drain) one while the copy engine moves the
// other, so a large copy runs at the slower of memcpy and DMA instead of their sum.
constexpr size_t kStagingBytes = size_t{8} << 20;

struct Staging {
  std::mutex mu;
  char* half[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};  // the last copy through each half
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
    void* buffer = nullptr;
    check_cuda(cudaMallocHost(&buffer, 2 * kStagingBytes), "cudaMallocHost", function, &device);
    s->half[0] = static_cast<char*>(buffer);
    s->half[1] = s->half[0] + kStagingBytes;
    for (cudaEvent_t& e : s->done) {
      check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate",
                 function, &device);
    }
    slot = std::move(s);
  }
  return *slot;
}

// An event recorded on `stream` after the work issued on it so far; made current with the
// stream's GPU by the caller. Destroying it right away is allowed: CUDA releases it once it
// completes, and waits already issued on it stay valid.
class StreamPoint {
 public:
  StreamPoint(cudaStream_t stream, const Device& device) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate",
               "to_device", &device);
    const cudaError_t status = cudaEventRecord(event_, stream);
    if (status != cudaSuccess) {
      cudaEventDestroy(event_);
      throw_cuda_error(status, "cudaEventRecord", "to_device", &device);
    }
  }
  ~StreamPoint() { cudaEventDestroy(event_); }
  StreamPoint(const StreamPoint&) = delete;
  StreamPoint& operator=(const StreamPoint&) = delete;
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A copy of `src` on another physical GPU, ordered on the two GPUs' non-blocking streams without
// blocking the host: the copy, on the destination's stream, waits for the work already issued on
// the source's stream (which wrote src), and the source's stream then waits for the copy, so that
// freeing src there (cudaFreeAsync when its last handle goes) or overwriting it cannot overtake
// the copy. The destination's later kernels follow the copy on its own stream.
Tensor peer_copy(const Tensor& src, const Device& device) {
  const char* fn = "to_device";
  Tensor out = Tensor::empty(src.shape(), src.dtype(), device);
  cudaStream_t from = activate(src.device(), fn);
  StreamPoint written(from, src.device());
  cudaStream_t to = activate(device, fn);
  check_cuda(cudaStreamWaitEvent(to, written.event(), 0), "cudaStreamWaitEvent", fn, &device);
  check_cuda(cudaMemcpyPeerAsync(out.raw_data(), physical_gpu_of(device), src.raw_data(),
                                 physical_gpu_of(src.device()), src.nbytes(), to),
             "cudaMemcpyPeerAsync", fn, &device);
  StreamPoint copied(to, device);
  activate(src.device(), fn);
  check_cuda(cudaStreamWaitEvent(from, copied.event(), 0), "cudaStreamWaitEvent", fn,
             &src.device());
  return out;
}

}  // namespace

void copy_to_device(void* dst, const void* host_src, size_t nbytes, const Device& device) {
  const char* fn = "to_device";
  cudaStream_t stream = activate(device, fn);
  Staging& staging = staging_for(device, fn);
  std::lock_guard<std::mutex> lock(staging.mu);
  for (size_t done = 0, i = 0; done < nbytes; done += kStagingBytes, ++i) {
    const size_t n = std::min(kStagingBytes, nbytes - done);
    char* half = staging.half[i % 2];
    // The copy that last read this half must be finished before it is refilled; the other
    // half's copy may still run meanwhile.
    check_cuda(cudaEventSynchronize(staging.done[i % 2]), "cudaEventSynchronize", fn, &device);
    std::memcpy(half, static_cast<const char*>(host_src) + done, n);
    check_cuda(cudaMemcpyAsync(static_cast<char*>(dst) + done, half, n, cudaMemcpyHostToDevice,
                               stream),
               "cudaMemcpyAsync", fn, &device);
    check_cuda(cudaEventRecord(staging.done[i % 2], stream), "cudaEventRecord", fn, &device);
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
}

void copy_to_host(void* host_dst, const void* src, size_t nbytes, const Device& device) {
  const char* fn = "to_host";
  cudaStream_t stream = activate(device, fn);
  Staging& staging = staging_for(device, fn);
  std::lock_guard<std::mutex> lock(staging.mu);
  // Chunk i goes through half i % 2: the copy of chunk i + 1 is issued before chunk i is drained,
  // so the copy engine fills one half while the host empties the other.
  auto issue = [&](size_t i) {
    const size_t done = i * kStagingBytes;
    if (done >= nbytes) return;
    check_cuda(cudaMemcpyAsync(staging.half[i % 2], static_cast<const char*>(src) + done,
                               std::min(kStagingBytes, nbytes - done), cudaMemcpyDeviceToHost,
                               stream),
               "cudaMemcpyAsync", fn, &device);
    check_cuda(cudaEventRecord(staging.done[i % 2], stream), "cudaEventRecord", fn, &device);
  };
  issue(0);
  for (size_t done = 0, i = 0; done < nbytes; done += kStagingBytes, ++i) {
    issue(i + 1);
    check_cuda(cudaEventSynchronize(staging.done[i % 2]), "cudaEventSynchronize", fn, &device);
    std::memcpy(static_cast<char*>(host_dst) + done, staging.half[i % 2],
                std::min(kStagingBytes, nbytes - done));
  }
  // Also orders an empty copy after the work already issued on the stream (it wrote src).
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", fn, &device);
}

Tensor to_device(const Tensor& host, const Device& device) {
  if (device.type != DeviceType::kGPU) {
    throw_error<InvalidArgumentError>("to_device", "{} is not a GPU device",
                                      device_to_string(device));
  }
  if (host.device().type == DeviceType::kGPU) {
    if (physical_gpu_of(host.device()) == physical_gpu_of(device)) return host.with_device(device);
    return peer_copy(host, device);
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
