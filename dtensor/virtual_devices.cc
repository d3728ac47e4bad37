#include "dtensor/virtual_devices.h"

#include <atomic>

#include "dtensor/collectives.h"
#include "runtime/error.h"
#include "runtime/process.h"

namespace dtensor {
namespace {
std::atomic<int64_t> virtual_cpus{1};

// Every process must have built the same mesh: compares the fingerprints of all processes.
void check_same_mesh_everywhere(const Mesh& mesh, const ProcessInfo& process) {
  Mesh processes =
      Mesh::create({{"process", process.count}}, DeviceType::kCPU, process.index, process.count);
  Tensor mine = Tensor::empty({1}, DType::kI64, Device{DeviceType::kCPU, process.index});
  mine.data<int64_t>()[0] = static_cast<int64_t>(mesh.fingerprint());
  Tensor all = all_gather(processes, processes.mask({"process"}), {mine}, 0)[0];
  for (int64_t p = 0; p < process.count; ++p) {
    if (all.data<int64_t>()[p] != mine.data<int64_t>()[0]) {
      throw_error<MeshError>("create_mesh",
                             "process {} created mesh {} but process {} created a different "
                             "one; every process must create the same mesh",
                             process.index, mesh.to_string(), p);
    }
  }
}

}  // namespace

void configure_virtual_cpus(int64_t n) {
  if (n < 1) throw_error<InvalidArgumentError>("configure_virtual_cpus", "need n >= 1, got {}", n);
  virtual_cpus.store(n);
}

int64_t num_virtual_cpus() { return virtual_cpus.load(); }

namespace {

// "batch=2,model=4", the dims as a mesh string spells them.
std::string dims_text(const std::vector<MeshDim>& dims) {
  std::string spec;
  for (const MeshDim& d : dims) {
    spec += (spec.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  }
  return spec;
}

void check_backend(const std::vector<MeshDim>& dims, DeviceType type) {
  if (type == DeviceType::kGPU && !gpu_backend_built()) {
    throw_error<UnimplementedError>(
        "create_mesh",
        "mesh |{}| has GPU devices, but no GPU backend is registered (build with --config=cuda, "
        "or set DTENSOR_EMULATED_GPUS=N for the emulated test device)",
        dims_text(dims));
  }
}

}  // namespace

Mesh create_mesh(std::vector<MeshDim> dims, std::string name) {
  return create_mesh(std::move(dims), DeviceType::kCPU, std::move(name));
}

Mesh create_mesh(std::vector<MeshDim> dims, DeviceType type, std::string name) {
  check_backend(dims, type);
  int64_t devices = 1;
  for (const MeshDim& d : dims) devices *= d.size;
  const int64_t local = num_virtual_cpus();
  const ProcessInfo process = this_process();
  if (devices != local * process.count) {
    const std::string spec = dims_text(dims);
    if (process.count == 1) {
      throw_error<MeshError>("create_mesh",
                             "mesh {} has {} devices but this process has {} virtual CPUs; call "
                             "configure_virtual_cpus({}) first",
                             spec, devices, local, devices);
    }
    throw_error<MeshError>("create_mesh",
                           "mesh {} has {} devices but {} processes with {} virtual CPUs each "
                           "have {}",
                           spec, devices, process.count, local, local * process.count);
  }
  Mesh mesh = Mesh::create(std::move(dims), type, process.index, process.count, std::move(name));
  if (process.count > 1) check_same_mesh_everywhere(mesh, process);
  return mesh;
}

Mesh create_mesh(const char* dims, std::string name) {
  return create_mesh(dims, DeviceType::kCPU, std::move(name));
}

Mesh create_mesh(const char* dims, DeviceType type, std::string name) {
  std::vector<MeshDim> parsed = parse_mesh_dims(dims == nullptr ? "" : dims);
  check_backend(parsed, type);
  int64_t devices = 1;
  for (const MeshDim& d : parsed) devices *= d.size;
  const ProcessInfo process = this_process();
  if (devices % process.count != 0) {
    throw_error<MeshError>("create_mesh",
                           "mesh {} has {} devices, which {} processes cannot share evenly", dims,
                           devices, process.count);
  }
  configure_virtual_cpus(devices / process.count);
  return create_mesh(std::move(parsed), type, std::move(name));
}

}  // namespace dtensor
