// Device identities: a type and a global device id within a mesh.
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

}  // namespace dtensor
