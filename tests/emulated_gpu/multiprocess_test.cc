// 2 processes x 2 emulated GPUs under mpirun (GPU meshes spanning the processes), through the
// host-staged MPI backend (runtime/mpi/host_staged_backend.h): a data-parallel matmul, its
// all-reduce across processes, relayouts that all-gather, all-to-all and reduce-scatter across
// them, a bucket all-reduced on MPI's communication thread, and a checkpoint saved from a GPU
// mesh and restored into GPU and CPU meshes of other shapes, each matching the CPU mesh bit for
// bit.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/host_copy.h"
#include "dtensor/relayout.h"
#include "dtensor/variable.h"
#include "dtensor/virtual_devices.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"

using namespace dtensor;

namespace {

Tensor host_global(const DTensor& t) {
  const Tensor g = to_global(t);
  return g.device().type == DeviceType::kGPU ? kernels::gpu::copy_to_host(g) : g;
}

// reduce_sum over the batch of x @ w: a partial sum across processes, then replicated.
Tensor program(DeviceType type) {
  const Mesh mesh = create_mesh("batch=4", type);
  const DTensor x = random_uniform({8, 6}, Layout::batch_sharded(mesh, "batch", 2), 1, -1, 1);
  const DTensor w = random_uniform({6, 5}, Layout::replicated(mesh, 2), 2, -1, 1);
  const DTensor y = matmul(x, w);
  const DTensor total = reduce_sum(y, {0});
  const DTensor gathered = relayout(y, Layout::replicated(mesh, 2));
  return kernels::concat({host_global(total).reshaped({1, 5}), host_global(gathered)}, 0);
}

// A partial sum over batch (groups spanning the processes) brought to rows sharded along batch
// (reduce-scatter across processes), then to columns (all-to-all across processes), on the
// {batch=2, model=2} mesh of `type`.
Tensor relayouts(DeviceType type) {
  const Mesh mesh = create_mesh("batch=2,model=2", type);
  const DTensor x = random_uniform({6, 9}, Layout({"unsharded", "batch"}, mesh), 3, -1, 1);
  const DTensor w = random_uniform({9, 7}, Layout({"batch", "unsharded"}, mesh), 4, -1, 1);
  const DTensor partial = matmul(x, w);  // partial over batch, whose groups span the processes
  const DTensor rows = relayout(partial, Layout({"batch", "unsharded"}, mesh));
  const DTensor cols = relayout(rows, Layout({"unsharded", "batch"}, mesh));
  return kernels::concat({host_global(rows), host_global(cols)}, 0);
}

// A bucket of two all-reduces over both dims of {batch=2, model=2} (a group spanning the
// processes), started and then waited for: MPI reduces it on its communication thread. Every local
// result of both, in order.
Tensor bucket(DeviceType type) {
  const Mesh mesh = create_mesh("batch=2,model=2", type);
  const DTensor a = random_uniform({4, 6}, Layout({"batch", "model"}, mesh), 6, -1, 1);
  const DTensor b = random_uniform({6}, Layout::batch_sharded(mesh, "model", 1), 7, -1, 1);
  const std::vector<std::vector<Tensor>> sums =
      all_reduce_start(mesh, 3, {a.shards(), b.shards()}, ReduceOp::kSum).wait();
  std::vector<Tensor> flat;
  for (const std::vector<Tensor>& value : sums) {
    for (const Tensor& shard : value) {
      const Tensor host = host_readable(shard);
      flat.push_back(host.reshaped({host.num_elements()}));
    }
  }
  return kernels::concat(flat, 0);
}

std::string shared_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

}  // namespace

TEST_CASE("a GPU mesh across 2 processes computes what the CPU mesh does") {
  configure_virtual_cpus(2);
  CHECK(bitwise_equal(program(DeviceType::kGPU), program(DeviceType::kCPU)));
  CHECK(bitwise_equal(relayouts(DeviceType::kGPU), relayouts(DeviceType::kCPU)));
  CHECK(bitwise_equal(bucket(DeviceType::kGPU), bucket(DeviceType::kCPU)));
}

TEST_CASE("a checkpoint of a GPU mesh across 2 processes restores into GPU and CPU meshes") {
  configure_virtual_cpus(2);
  const Mesh cpu = create_mesh("batch=4");
  const Tensor expected =
      host_global(random_uniform({13, 7}, Layout::replicated(cpu, 2), 5, -1, 1));
  const Mesh saved_on = create_mesh("batch=2,model=2", DeviceType::kGPU);
  const std::string path = shared_path("gpu-ckpt");
  {
    DVariable w(random_uniform({13, 7}, Layout({"model", "batch"}, saved_on), 5, -1, 1), "w");
    Checkpoint c;
    c.add_variable("w", w);
    c.save(path);
  }
  const Mesh gpu4 = create_mesh("batch=4", DeviceType::kGPU);
  for (const Layout& to : {Layout::batch_sharded(gpu4, "batch", 2), Layout::replicated(gpu4, 2),
                           Layout({"unsharded", "batch"}, cpu)}) {
    INFO(to.to_string());
    DVariable r(zeros({13, 7}, to), "w");
    Checkpoint c;
    c.add_variable("w", r);
    c.restore(path);
    CHECK(bitwise_equal(host_global(r.value()), expected));
  }
}
