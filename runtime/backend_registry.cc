#include "runtime/backend_registry.h"

#include <array>

#include "runtime/error.h"
#include "runtime/gpu_backend.h"
#include "runtime/hierarchical_backend.h"

namespace dtensor {
namespace {

// Room for device types added later; an index past the end has no backend.
constexpr size_t kMaxDeviceTypes = 8;

struct Backends {
  std::shared_ptr<CollectiveBackend> intra;
  // `intra` composed with the inter-process backend, or `intra` when there is none.
  std::shared_ptr<CollectiveBackend> spanning;
};

// CPU: the in-process backend. GPU: the registered GPU backend's own collectives, if it has any
// (runtime/gpu_backend.h; the emulated GPU's).
std::array<Backends, kMaxDeviceTypes> defaults() {
  std::array<Backends, kMaxDeviceTypes> s;
  std::shared_ptr<CollectiveBackend> in_process = make_in_process_backend();
  s[static_cast<size_t>(DeviceType::kCPU)] = {in_process, in_process};
  const GpuBackend* gpu = registered_gpu_backend();
  if (gpu != nullptr && gpu->make_collectives != nullptr) {
    std::shared_ptr<CollectiveBackend> intra = gpu->make_collectives();
    s[static_cast<size_t>(DeviceType::kGPU)] = {intra, intra};
  }
  return s;
}

std::array<Backends, kMaxDeviceTypes>& registry() {
  static std::array<Backends, kMaxDeviceTypes> slots = defaults();
  return slots;
}

}  // namespace

void register_collective_backends(DeviceType type, std::shared_ptr<CollectiveBackend> intra,
                                  std::shared_ptr<CollectiveBackend> inter) {
  const size_t index = static_cast<size_t>(type);
  if (index >= kMaxDeviceTypes) {
    throw_error<InvalidArgumentError>("register_collective_backends",
                                      "device type {} is past the registry's {} slots",
                                      device_type_name(type), kMaxDeviceTypes);
  }
  if (!intra && inter) {
    throw_error<InvalidArgumentError>(
        "register_collective_backends",
        "{} has an inter-process backend ({}) but no intra-process one to compose it with",
        device_type_name(type), inter->name());
  }
  Backends& slot = registry()[index];
  slot.spanning = inter ? make_hierarchical_backend(intra, std::move(inter)) : intra;
  slot.intra = std::move(intra);
}

void reset_collective_backends() { registry() = defaults(); }

CollectiveBackend& collective_backend_for(DeviceType type, bool spans_processes,
                                          std::string_view mesh_dims, const char* collective) {
  const size_t index = static_cast<size_t>(type);
  CollectiveBackend* backend = nullptr;
  if (index < kMaxDeviceTypes) {
    const Backends& slot = registry()[index];
    backend = spans_processes ? slot.spanning.get() : slot.intra.get();
  }
  if (backend == nullptr) {
    throw_error<UnimplementedError>(collective,
                                    "no collective backend is registered for {} devices (mesh "
                                    "{}); register one with register_collective_backends",
                                    device_type_name(type), mesh_dims);
  }
  return *backend;
}

}  // namespace dtensor
