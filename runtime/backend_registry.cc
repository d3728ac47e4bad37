#include "runtime/backend_registry.h"

#include <array>

#include "runtime/error.h"
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

std::array<Backends, kMaxDeviceTypes>& registry() {
  static std::array<Backends, kMaxDeviceTypes> slots = [] {
    std::array<Backends, kMaxDeviceTypes> s;
    std::shared_ptr<CollectiveBackend> in_process = make_in_process_backend();
    s[static_cast<size_t>(DeviceType::kCPU)] = {in_process, in_process};
    return s;
  }();
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

void reset_collective_backends() {
  for (Backends& slot : registry()) slot = {};
  std::shared_ptr<CollectiveBackend> in_process = make_in_process_backend();
  registry()[static_cast<size_t>(DeviceType::kCPU)] = {in_process, in_process};
}

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
