// The runtime and the MPI backend under mpirun (2 and 4 ranks): process identity, distributed
// meshes and their consistency check, broadcast and barrier across processes, and pack/unpack of
// local components only.
#include <catch2/catch.hpp>

#include "dtensor/dtensor.h"
#include "dtensor/virtual_devices.h"
#include "runtime/block.h"
#include "runtime/collectives.h"
#include "runtime/process.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::integer_tensor;

TEST_CASE("each rank knows its place and owns a contiguous block of the mesh") {
  const ProcessInfo p = this_process();
  REQUIRE(p.count > 1);
  configure_virtual_cpus(2);
  Mesh mesh = create_mesh({{"batch", 2 * p.count}});
  // Spanning processes: the in-process backend composed with MPI; within this process: in-process.
  CHECK(collective_backend_for(mesh).name() == "hierarchical(in-process, mpi)");
  CHECK(collective_backend_for(Mesh::create({{"batch", 2}}, DeviceType::kCPU)).name() ==
        "in-process");
  CHECK(mesh.num_processes() == p.count);
  CHECK(mesh.process_index() == p.index);
  CHECK(mesh.local_device_ids() == std::vector<int64_t>{2 * p.index, 2 * p.index + 1});
}

TEST_CASE("processes that build different meshes all get the error") {
  const ProcessInfo p = this_process();
  configure_virtual_cpus(2);
  // Same device count, different dim names on the last process.
  std::vector<MeshDim> dims = {{p.index == p.count - 1 ? "model" : "batch", 2 * p.count}};
  CHECK_THROWS_AS(create_mesh(dims), MeshError);
  CHECK_THROWS_WITH(create_mesh(dims), Catch::Contains("created a different one; every process "
                                                       "must create the same mesh"));
}

TEST_CASE("broadcast and barrier span processes") {
  const ProcessInfo p = this_process();
  configure_virtual_cpus(2);
  Mesh mesh = create_mesh({{"batch", 2 * p.count}});
  std::vector<Tensor> shards;
  for (int64_t id : mesh.local_device_ids()) {
    Tensor t = Tensor::empty({3}, DType::kI64, Device{DeviceType::kCPU, id});
    for (int64_t i = 0; i < 3; ++i) t.data<int64_t>()[i] = 100 * id + i;
    shards.push_back(t);
  }
  for (int64_t root : {int64_t{0}, 2 * p.count - 1}) {
    std::vector<Tensor> out = broadcast(mesh, mesh.mask({"batch"}), shards, root);
    for (const Tensor& t : out) {
      for (int64_t i = 0; i < 3; ++i) CHECK(t.data<int64_t>()[i] == 100 * root + i);
    }
  }
  barrier(mesh);
}

TEST_CASE("pack takes local components; to_global gathers from every process") {
  const ProcessInfo p = this_process();
  configure_virtual_cpus(2);
  Mesh mesh = create_mesh({{"batch", 2 * p.count}});
  Tensor global = integer_tensor({4 * p.count + 1, 3}, DType::kF32, 5);
  Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  std::vector<Tensor> local;
  for (int64_t id : mesh.local_device_ids()) {
    local.push_back(slice_box(global, rows.shard_offset(global.shape(), id),
                              rows.shard_shape(global.shape(), id))
                        .with_device(Device{DeviceType::kCPU, id}));
  }
  DTensor packed = pack(local, rows, global.shape());
  CHECK(bitwise_equal(to_global(packed), global));
  std::vector<Tensor> back = unpack(packed);
  REQUIRE(back.size() == 2);
  for (size_t i = 0; i < back.size(); ++i) CHECK(bitwise_equal(back[i], local[i]));
}
