#include "train/checkpoint/internal/sync.h"

#include <unistd.h>

#include <chrono>
#include <random>

#include "dtensor/collectives.h"
#include "dtensor/dtensor.h"
#include "dtensor/host_copy.h"

namespace dtensor::checkpoint_internal {
namespace {

MeshDimMask all_dims(const Mesh& mesh) {
  return mesh.rank() >= 32 ? ~MeshDimMask{0} : (MeshDimMask{1} << mesh.rank()) - 1;
}

// One i64 scalar per local device, holding `value` (put on GPU devices through a host copy).
std::vector<Tensor> scalars(const Mesh& mesh, int64_t value) {
  Tensor host = Tensor::empty({1}, DType::kI64, Device{});
  host.data<int64_t>()[0] = value;
  std::vector<Tensor> out;
  for (int64_t device : mesh.local_device_ids()) {
    out.push_back(on_device(host, mesh_device(mesh, device)));
  }
  return out;
}

int64_t first_scalar(const std::vector<Tensor>& scalars) {
  return host_readable(scalars[0]).data<int64_t>()[0];
}

}  // namespace

std::string make_save_id(const std::optional<Mesh>& mesh) {
  std::random_device device;
  uint64_t id = (uint64_t{device()} << 32) ^ device();
  id ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
        0x9E3779B97F4A7C15ull;
  id ^= static_cast<uint64_t>(::getpid()) << 17;
  if (mesh && mesh->num_processes() > 1) {
    std::vector<Tensor> out =
        broadcast(*mesh, all_dims(*mesh), scalars(*mesh, static_cast<int64_t>(id)), 0);
    id = static_cast<uint64_t>(first_scalar(out));
  }
  return fmt::format("{:016x}", id);
}

bool all_succeeded(const std::optional<Mesh>& mesh, bool ok) {
  if (!mesh || mesh->num_processes() == 1) return ok;
  barrier(*mesh);
  std::vector<Tensor> failed =
      all_reduce(*mesh, all_dims(*mesh), scalars(*mesh, ok ? 0 : 1), ReduceOp::kMax);
  return first_scalar(failed) == 0;
}

}  // namespace dtensor::checkpoint_internal
