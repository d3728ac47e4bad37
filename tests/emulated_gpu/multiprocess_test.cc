// 2 processes x 2 emulated GPUs under mpirun (a batch=4 GPU mesh spanning the processes): a
// data-parallel matmul, its gradient all-reduce across processes and a relayout match the same
// program on the CPU mesh of the same shape, bit for bit.
#include <catch2/catch.hpp>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "dtensor/virtual_devices.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernels.h"
#include "ops/ops.h"

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

}  // namespace

TEST_CASE("a GPU mesh across 2 processes computes what the CPU mesh does") {
  configure_virtual_cpus(2);
  CHECK(bitwise_equal(program(DeviceType::kGPU), program(DeviceType::kCPU)));
}
