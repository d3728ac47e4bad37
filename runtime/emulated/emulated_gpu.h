// The emulated GPU: a TEST DOUBLE for CUDA devices, for machines without a GPU (CI).
//
// It exists so that the whole GPU path (meshes of DeviceType::kGPU, relayout, collectives, the
// kernel front's GPU table) runs in every test of a CPU-only build, on memory the host cannot
// touch: its allocator hands out opaque pages (runtime/emulated/opaque_memory.h), its kernels are
// the CPU kernels run inside an open window (kernels/emulated/), and its copies are memcpy inside
// one. Host code above the kernel front that reads or writes a GPU shard then segfaults in the
// test instead of silently working, as it would fail on a real GPU. It says nothing about CUDA
// itself (launch errors, streams racing, peer access): only a GPU run shows those.
//
// Switched on by DTENSOR_EMULATED_GPUS=N (1 to 64 physical GPUs) when the process starts, or by
// enable(N): the emulated backend then takes the GPU backend slot (runtime/gpu_backend.h) and the
// GPU collectives (runtime/backend_registry.h). As with CUDA, logical GPU device i of a mesh runs
// on physical GPU i % N, and the logical devices of one GPU share its stream.
//
// Streams: work runs synchronously on the calling thread, so a stream is the order in which the
// host issued the work; activate() returns it (with a count of what ran on it, for tests), and
// synchronize() only checks the device.
//
// Thread-safety: any thread; enable() must not race with GPU work (call it at start-up).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "runtime/device.h"

namespace dtensor::emulated {

// The name of the switch.
inline constexpr const char* kEnvironmentVariable = "DTENSOR_EMULATED_GPUS";
inline constexpr int kMaxGpus = 64;

// The physical GPU count DTENSOR_EMULATED_GPUS asks for: nullopt when unset; throws
// InvalidArgumentError "[DTENSOR_EMULATED_GPUS] 'x' is not a GPU count (1 to 64)" otherwise.
std::optional<int> requested_gpus();

// Turns the emulated GPU on with `physical_gpus` GPUs (registers the backend and its collectives).
// Throws InvalidArgumentError outside 1..kMaxGpus.
void enable(int physical_gpus);
// True once enable() ran (or DTENSOR_EMULATED_GPUS was set at start-up).
bool enabled();

// Emulated physical GPUs; 0 when disabled.
int physical_gpu_count();
// Throws UnimplementedError "[function] GPU:3 is not an emulated GPU device: ..." when the
// emulated GPU is off (naming the switch) or `device` is not a GPU device.
void require_gpu(const Device& device, const char* function);
// id % physical_gpu_count(); throws as require_gpu.
int physical_gpu_of(const Device& device);

struct Stream {
  int gpu = 0;
  std::atomic<int64_t> launches{0};  // kernels and copies issued on it
};

// The stream of the device's physical GPU, with one more launch counted. Throws as require_gpu.
Stream& activate(const Device& device, const char* function);
// Work is synchronous, so there is nothing to wait for; checks the device like activate.
void synchronize(const Device& device, const char* function = "synchronize");

}  // namespace dtensor::emulated
