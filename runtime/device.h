// Device identities: a type and a global device id within a mesh. Plain values, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dtensor {

enum class DeviceType : uint8_t { kCPU, kGPU };

// "CPU" or "GPU", the spelling used in TF device strings.
std::string_view device_type_name(DeviceType type);
// Inverse of device_type_name; throws InvalidArgumentError for anything else.
DeviceType parse_device_type(std::string_view name);

struct Device {
  DeviceType type = DeviceType::kCPU;
  int64_t id = 0;  // global device id within its mesh

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.id == b.id;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// "CPU:3"
std::string device_to_string(const Device& device);

// True if a buffer on `a` can be read and written on `b` as it is, so that replicated shards on
// the two devices may share one buffer: all CPU devices of a process share host memory, and a GPU
// device shares only with itself.
inline bool same_memory_space(const Device& a, const Device& b) {
  if (a.type != b.type) return false;
  return a.type == DeviceType::kCPU || a.id == b.id;
}

// True if GPU devices `a` and `b` are logical devices of one physical GPU of the registered GPU
// backend (runtime/gpu_backend.h), so that work of both may run on either without a peer copy;
// false for other devices and without a registered backend.
bool same_physical_gpu(const Device& a, const Device& b);

// True if a GPU backend is registered (runtime/gpu_backend.h): the CUDA runtime, or the emulated
// GPU when DTENSOR_EMULATED_GPUS is set.
bool gpu_backend_built();

}  // namespace dtensor
