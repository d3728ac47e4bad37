#include "dtensor/virtual_devices.h"

#include <atomic>

#include "runtime/error.h"

namespace dtensor {
namespace {
std::atomic<int64_t> virtual_cpus{1};
}  // namespace

void configure_virtual_cpus(int64_t n) {
  if (n < 1) throw_error<InvalidArgumentError>("configure_virtual_cpus", "need n >= 1, got {}", n);
  virtual_cpus.store(n);
}

int64_t num_virtual_cpus() { return virtual_cpus.load(); }

Mesh create_mesh(std::vector<MeshDim> dims, std::string name) {
  int64_t devices = 1;
  for (const MeshDim& d : dims) devices *= d.size;
  const int64_t local = num_virtual_cpus();
  if (devices != local) {
    std::string spec;
    for (const MeshDim& d : dims)
      spec += (spec.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
    throw_error<MeshError>("create_mesh",
                           "mesh {} has {} devices but this process has {} virtual CPUs; call "
                           "configure_virtual_cpus({}) first",
                           spec, devices, local, devices);
  }
  return Mesh::create(std::move(dims), DeviceType::kCPU, 0, 1, std::move(name));
}

}  // namespace dtensor
