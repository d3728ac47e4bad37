// The runtime and the MPI backend under mpirun (2 and 4 ranks): process identity, distributed
// meshes and their consistency check, broadcast and barrier across processes, pack/unpack of
// local components only, and the MPI backend's one-member-per-process contract.
#include <catch2/catch.hpp>

#include "dtensor/collectives.h"
#include "dtensor/dtensor.h"
#include "dtensor/virtual_devices.h"
#include "runtime/block.h"
#include "runtime/mpi/mpi_backend.h"
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

TEST_CASE("the MPI backend alone is flat: several members of one process are an error") {
  const ProcessInfo p = this_process();
  std::shared_ptr<CollectiveBackend> mpi = make_mpi_backend();
  // Every process owns two members; each throws before any MPI call, so none waits.
  Group group{{}, {}, p.index};
  for (int64_t d = 0; d < 2 * p.count; ++d) {
    group.devices.push_back(d);
    group.owners.push_back(d / 2);
  }
  Tensor t = Tensor::zeros({2}, DType::kF32);
  CHECK_THROWS_AS(mpi->all_reduce(group, {t, t}, ReduceOp::kSum), CommunicationError);
  CHECK_THROWS_WITH(mpi->all_reduce(group, {t, t}, ReduceOp::kSum),
                    "[all_reduce] the mpi backend takes one member per process, but process 0 "
                    "owns devices 0 and 1 of the group; compose it with an intra-process backend "
                    "(make_hierarchical_backend)");
  CHECK_THROWS_WITH(mpi->barrier(group),
                    "[barrier] the mpi backend takes one member per process, but process 0 owns "
                    "devices 0 and 1 of the group; compose it with an intra-process backend "
                    "(make_hierarchical_backend)");
  // One member per process: a flat all-reduce across all of them.
  Group flat{{}, {}, p.index};
  for (int64_t d = 0; d < p.count; ++d) {
    flat.devices.push_back(d);
    flat.owners.push_back(d);
  }
  Tensor mine = Tensor::empty({2}, DType::kI64);
  mine.data<int64_t>()[0] = p.index;
  mine.data<int64_t>()[1] = 1;
  std::vector<Tensor> sum = mpi->all_reduce(flat, {mine}, ReduceOp::kSum);
  REQUIRE(sum.size() == 1);
  CHECK(sum[0].data<int64_t>()[0] == p.count * (p.count - 1) / 2);
  CHECK(sum[0].data<int64_t>()[1] == p.count);
}
