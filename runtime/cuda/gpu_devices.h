// The GPUs of this process and their streams.
//
// Logical devices: a mesh's GPU device with global id i runs on physical GPU i % count (count =
// the GPUs visible to this process), so a batch=8 mesh runs on one GPU as eight logical devices,
// like TensorFlow's logical GPUs. Logical devices on one physical GPU share its stream: their work
// is ordered on the GPU exactly as the host issued it, so a buffer written for logical device 3
// can be read for logical device 5 (a collective) without events.
//
// Streams: one non-blocking stream per physical GPU, created on first use and never destroyed
// (storage may be freed during exit). Every kernel, copy and stream-ordered allocation of a
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

// The physical GPU of a logical device: id % physical_gpu_count().
int physical_gpu_of(const Device& device);

// Makes the device's physical GPU current on this thread and returns its stream. Throws as
// require_gpu when no GPU is visible.
cudaStream_t activate(const Device& device, const char* function);

// Waits until all work issued so far for the device's physical GPU has finished; turns an
// asynchronous kernel failure into CudaError naming `function`.
void synchronize(const Device& device, const char* function = "synchronize");

}  // namespace dtensor::cuda
