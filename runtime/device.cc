#include "runtime/device.h"

#include <fmt/format.h>

#include "runtime/error.h"

namespace dtensor {

std::string_view device_type_name(DeviceType type) {
  return type == DeviceType::kCPU ? "CPU" : "GPU";
}

DeviceType parse_device_type(std::string_view name) {
  if (name == "CPU") return DeviceType::kCPU;
  if (name == "GPU") return DeviceType::kGPU;
  throw_error<InvalidArgumentError>("parse_device_type", "unknown device type '{}' (CPU or GPU)",
                                    name);
}

std::string device_to_string(const Device& device) {
  return fmt::format("{}:{}", device_type_name(device.type), device.id);
}

}  // namespace dtensor
