#include "runtime/cuda/gpu_devices.h"

#include <fmt/format.h>

#include <mutex>
#include <vector>

#include "runtime/cuda/cuda_check.h"

namespace dtensor::cuda {
namespace {

struct Gpus {
  int count = 0;
  std::string reason;
  std::vector<cudaStream_t> streams;  // one per physical GPU, created lazily
  std::vector<std::once_flag>* created = nullptr;
};

Gpus& gpus() {
  // Never destroyed: storage freed during exit still needs the streams.
  static Gpus* g = [] {
    auto* s = new Gpus;
    const cudaError_t status = cudaGetDeviceCount(&s->count);
    if (status != cudaSuccess || s->count == 0) {
      s->reason = fmt::format("cudaGetDeviceCount: {}",
                              status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
      s->count = 0;
      cudaGetLastError();
    }
    s->streams.assign(static_cast<size_t>(s->count), nullptr);
    s->created = new std::vector<std::once_flag>(static_cast<size_t>(s->count));
    return s;
  }();
  return *g;
}

}  // namespace

int physical_gpu_count() { return gpus().count; }

const std::string& no_gpu_reason() { return gpus().reason; }

void require_gpu(const Device& device, const char* function) {
  if (gpus().count == 0) {
    throw_error<CudaError>(function, "no GPU visible for {} ({})", device_to_string(device),
                           gpus().reason);
  }
}

int physical_gpu_of(const Device& device) {
  const int count = gpus().count;
  return count == 0 ? 0 : static_cast<int>(device.id % count);
}

cudaStream_t activate(const Device& device, const char* function) {
  require_gpu(device, function);
  Gpus& g = gpus();
  const int gpu = physical_gpu_of(device);
  check_cuda(cudaSetDevice(gpu), "cudaSetDevice", function, &device);
  std::call_once((*g.created)[static_cast<size_t>(gpu)], [&] {
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate",
               function, &device);
    // Keep freed pool memory cached instead of returning it to the driver at every sync.
    cudaMemPool_t pool;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, gpu), "cudaDeviceGetDefaultMemPool", function,
               &device);
    uint64_t threshold = UINT64_MAX;
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
               "cudaMemPoolSetAttribute", function, &device);
    g.streams[static_cast<size_t>(gpu)] = stream;
  });
  return g.streams[static_cast<size_t>(gpu)];
}

void synchronize(const Device& device, const char* function) {
  cudaStream_t stream = activate(device, function);
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", function, &device);
}

}  // namespace dtensor::cuda
