#include "runtime/cuda/gpu_devices.h"

#include <fmt/format.h>

#include <cstdlib>
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

// This process's node-local rank and the number of processes on its node, from the launcher's
// environment (Open MPI, then MPICH/Hydra); 0 of 1 when not launched that way.
struct LocalRank {
  int rank = 0;
  int size = 1;
};

const LocalRank& local_rank() {
  static const LocalRank local = [] {
    auto read = [](const char* a, const char* b, int otherwise) {
      const char* v = std::getenv(a);
      if (v == nullptr) v = std::getenv(b);
      return v != nullptr ? std::atoi(v) : otherwise;
    };
    LocalRank l{read("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", 0),
                read("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", 1)};
    if (l.size < 1 || l.rank < 0 || l.rank >= l.size) l = LocalRank{};
    return l;
  }();
  return local;
}

// The default pool of `gpu`: freed blocks stay cached instead of going back to the driver at
// every sync, and every peer GPU that can reach it may read and write its blocks (the kernels
// that combine tensors of several GPUs, and peer copies, need that).
void configure_pool(int gpu, int count, const char* function, const Device& device) {
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, gpu), "cudaDeviceGetDefaultMemPool", function,
             &device);
  uint64_t threshold = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
             "cudaMemPoolSetAttribute", function, &device);
  for (int peer = 0; peer < count; ++peer) {
    int can_access = 0;
    if (peer == gpu) continue;
    check_cuda(cudaDeviceCanAccessPeer(&can_access, peer, gpu), "cudaDeviceCanAccessPeer",
               function, &device);
    if (!can_access) continue;
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = peer;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    check_cuda(cudaMemPoolSetAccess(pool, &access, 1), "cudaMemPoolSetAccess", function, &device);
  }
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

int physical_gpu_for(int64_t id, int count, int local_rank, int local_size) {
  if (count <= 0) return 0;
  if (local_size <= 1) return static_cast<int>(id % count);
  const int mine = local_rank < count ? (count - local_rank + local_size - 1) / local_size : 0;
  if (mine == 0) return local_rank % count;
  return local_rank + local_size * static_cast<int>(id % mine);
}

int physical_gpu_of(const Device& device) {
  return physical_gpu_for(device.id, gpus().count, local_rank().rank, local_rank().size);
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
    configure_pool(gpu, g.count, function, device);
    g.streams[static_cast<size_t>(gpu)] = stream;
  });
  return g.streams[static_cast<size_t>(gpu)];
}

void synchronize(const Device& device, const char* function) {
  cudaStream_t stream = activate(device, function);
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize", function, &device);
}

void release_cached_memory(const Device& device, const char* function) {
  synchronize(device, function);
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, physical_gpu_of(device)),
             "cudaDeviceGetDefaultMemPool", function, &device);
  check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo", function, &device);
}

}  // namespace dtensor::cuda
