// The GPUs of this process and their streams.
//
// Logical devices: a mesh's GPU device with global id i runs on physical GPU i % count (count =
// the GPUs visible to this process), so a batch=8 mesh runs on one GPU as eight logical devices,
// like TensorFlow's logical GPUs. Several processes on one node (mpirun's node-local rank r of s,
// from OMPI_COMM_WORLD_LOCAL_RANK/_SIZE or MPI_LOCALRANKID/MPI_LOCALNRANKS) split the GPUs they
// see: process r takes GPUs r, r + s, r + 2s, ... and maps its ids round-robin onto those, so no
// two processes share a GPU while there are enough of them (see physical_gpu_for). Logical devices on one physical GPU share its stream: their work
// is ordered on the GPU exactly as the host issued it, so a buffer written for logical device 3
// can be read for logical device 5 (a collective) without events.
//
// Streams: one non-blocking stream per physical GPU, created on first use and never destroyed
// (storage may be freed during exit). Memory pools: each GPU's default pool keeps freed blocks
// cached, is made readable and writable by every peer GPU that can access it (so a kernel on one
// GPU may read another's tensors), and gives its cache back to the driver when an allocation
// fails (release_cached_memory). Every kernel, copy and stream-ordered allocation of a
// logical device goes to stream_for(device); the host synchronizes only when it reads results
// (copies to host) or when a caller asks (synchronize).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "runtime/device.h"

namespace dtensor::cuda {

// The number of GPUs visible to this process (cudaGetDeviceCount), 0 when none; computed once.
int physical_gpu_count();
// Why no GPU is visible: "cudaGetDeviceCount: no CUDA-capable device is detected"; empty when
// GPUs are visible.
const std::string& no_gpu_reason();
// Throws CudaError "[function] no GPU visible for GPU:3 (cudaGetDeviceCount: ...)" when no GPU is
// visible.
void require_gpu(const Device& device, const char* function);

// The physical GPU of a logical device: physical_gpu_for(id, physical_gpu_count(), and this
// process's node-local rank and size).
int physical_gpu_of(const Device& device);

// The placement rule: GPU local_rank + local_size * (id % n), where n = the number of GPUs among
// the `count` seen whose index is local_rank modulo local_size; local_rank % count when there is
// none (more processes than GPUs: they share). One process (local_size 1): id % count. 0 when
// count is 0.
int physical_gpu_for(int64_t id, int count, int local_rank, int local_size);

// Waits for the GPU's work and returns the memory its pool caches to the driver (what a failed
// allocation does before it tries again). Throws as require_gpu when no GPU is visible.
void release_cached_memory(const Device& device, const char* function);

// Makes the device's physical GPU current on this thread and returns its stream. Throws as
// require_gpu when no GPU is visible.
cudaStream_t activate(const Device& device, const char* function);

// Waits until all work issued so far for the device's physical GPU has finished; turns an
// asynchronous kernel failure into CudaError naming `function`.
void synchronize(const Device& device, const char* function = "synchronize");

}  // namespace dtensor::cuda
