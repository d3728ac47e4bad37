// The host-staged backend (runtime/mpi/host_staged_backend.h) over processes emulated by threads
// (runtime/threaded_processes_backend.h stands in for MPI): every collective over emulated-GPU
// meshes spanning 2 processes, composed with the in-process GPU backend by the hierarchical
// backend, gives the CPU mesh's results bit for bit, each on its member's GPU. Shards live in
// opaque memory, so a host read of one on the way crashes the test. The same path runs under
// mpirun in multiprocess_mpi_test_np2.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/collectives.h"
#include "dtensor/dtensor.h"
#include "dtensor/host_copy.h"
#include "runtime/backend_registry.h"
#include "runtime/gpu_backend.h"
#include "runtime/mpi/host_staged_backend.h"
#include "runtime/threaded_processes_backend.h"

using namespace dtensor;

namespace {

using Collective =
    std::function<std::vector<Tensor>(const Mesh&, MeshDimMask, const std::vector<Tensor>&)>;

// One [5, 3] f32 shard per local device of `mesh`, from the device id (uneven along both axes).
std::vector<Tensor> shards_of(const Mesh& mesh) {
  std::vector<Tensor> out;
  for (int64_t id : mesh.local_device_ids()) {
    Tensor host = Tensor::empty({5, 3}, DType::kF32);
    for (int64_t e = 0; e < 15; ++e) host.data<float>()[e] = 0.1f * float(id * 15 + e) - 1.3f;
    out.push_back(on_device(host, mesh_device(mesh, id)));
  }
  return out;
}

const std::vector<std::pair<std::string, Collective>>& collectives() {
  static const std::vector<std::pair<std::string, Collective>> list = {
      {"all_reduce",
       [](const Mesh& m, MeshDimMask d, const std::vector<Tensor>& s) {
         return all_reduce(m, d, s, ReduceOp::kSum);
       }},
      {"all_reduce max",
       [](const Mesh& m, MeshDimMask d, const std::vector<Tensor>& s) {
         return all_reduce(m, d, s, ReduceOp::kMax);
       }},
      {"all_gather", [](const Mesh& m, MeshDimMask d,
                        const std::vector<Tensor>& s) { return all_gather(m, d, s, 0); }},
      {"reduce_scatter",
       [](const Mesh& m, MeshDimMask d, const std::vector<Tensor>& s) {
         return reduce_scatter(m, d, s, ReduceOp::kSum, 0);
       }},
      {"all_to_all", [](const Mesh& m, MeshDimMask d,
                        const std::vector<Tensor>& s) { return all_to_all(m, d, s, 0, 1); }},
      {"broadcast", [](const Mesh& m, MeshDimMask d,
                       const std::vector<Tensor>& s) { return broadcast(m, d, s, 1); }},
      {"all_reduce_start",
       [](const Mesh& m, MeshDimMask d, const std::vector<Tensor>& s) {
         return all_reduce_start(m, d, {s}, ReduceOp::kSum).wait()[0];
       }},
  };
  return list;
}

// What process `p` of 2 sees differ between the GPU and the CPU mesh {x=2 (across processes),
// y=2}, for every collective and every group shape; empty when nothing does.
std::vector<std::string> mismatches(int64_t p) {
  std::vector<std::string> out;
  const Mesh cpu = Mesh::create({{"x", 2}, {"y", 2}}, DeviceType::kCPU, p, 2);
  const Mesh gpu = Mesh::create({{"x", 2}, {"y", 2}}, DeviceType::kGPU, p, 2);
  for (MeshDimMask dims : {MeshDimMask{1}, MeshDimMask{2}, MeshDimMask{3}}) {
    for (const auto& [name, run] : collectives()) {
      const std::vector<Tensor> inputs = shards_of(gpu);
      const std::vector<Tensor> on_gpu = run(gpu, dims, inputs);
      const std::vector<Tensor> on_cpu = run(cpu, dims, shards_of(cpu));
      for (size_t i = 0; i < on_gpu.size(); ++i) {
        const std::string what =
            fmt::format("{} over dims {} on {}", name, dims, device_to_string(inputs[i].device()));
        if (on_gpu[i].device() != inputs[i].device()) out.push_back(what + ": wrong device");
        if (!bitwise_equal(host_readable(on_gpu[i]), on_cpu[i])) out.push_back(what);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("collectives of GPU meshes across processes, staged through host memory, match CPU") {
  const GpuBackend* gpu = registered_gpu_backend();
  REQUIRE(gpu != nullptr);
  REQUIRE(gpu->make_collectives != nullptr);
  std::shared_ptr<CollectiveBackend> host = make_threaded_processes_backend(30);
  std::shared_ptr<CollectiveBackend> staged = make_host_staged_backend(host);
  CHECK(staged->name() == "host-staged(threaded-processes)");
  register_collective_backends(DeviceType::kCPU, make_in_process_backend(), host);
  register_collective_backends(DeviceType::kGPU, gpu->make_collectives(), staged);
  std::vector<std::vector<std::string>> failures(2);
  std::vector<std::thread> processes;
  for (int64_t p = 0; p < 2; ++p) {
    processes.emplace_back([&, p] {
      try {
        failures[static_cast<size_t>(p)] = mismatches(p);
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(p)].push_back(e.what());
      }
    });
  }
  for (std::thread& t : processes) t.join();
  reset_collective_backends();
  for (int64_t p = 0; p < 2; ++p) {
    INFO("process " << p << ": " << fmt::format("{}", fmt::join(failures[p], "; ")));
    CHECK(failures[static_cast<size_t>(p)].empty());
  }
}

TEST_CASE("make_host_staged_backend names itself on a null host backend") {
  CHECK_THROWS_MATCHES(make_host_staged_backend(nullptr), InvalidArgumentError,
                       Catch::Message("[make_host_staged_backend] the host backend is null"));
}
