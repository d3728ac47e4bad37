// The checks above the kernel front that need values (the label range check of
// sparse_softmax_cross_entropy, exact_factor of a partial product, DVariable::assign_add/sub) run
// on GPU meshes without reading shard
// memory on the host: here the "GPU" shards are pages the host cannot read
// (dtensor/opaque_memory_testing.h), so a host read crashes the test. They give the CPU's results
// and error texts, through a counted number of transfers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "dtensor/host_copy.h"
#include "dtensor/opaque_memory_testing.h"
#include "dtensor/variable.h"
#include "ops/ops.h"

using namespace dtensor;
using testing::TransferEntries;
using testing::transfers;
using Catch::Message;

namespace {

// `global` (rank >= 1, split along dim 0 into `mesh`'s two devices) as a DTensor on `mesh`: host
// shards on a CPU mesh, opaque memory on a GPU mesh.
template <typename T>
DTensor two_shards(const Mesh& mesh, const Shape& shape, const std::vector<T>& global) {
  const Layout layout = Layout::batch_sharded(mesh, "batch", static_cast<int64_t>(shape.size()));
  std::vector<Tensor> shards;
  for (int64_t id = 0; id < 2; ++id) {
    Tensor host = Tensor::empty(layout.shard_shape(shape, id), dtype_of<T>());
    const int64_t n = host.num_elements();
    for (int64_t e = 0; e < n; ++e) host.data<T>()[e] = global[static_cast<size_t>(id * n + e)];
    shards.push_back(on_device(host, Device{mesh.device_type(), id}));
  }
  return DTensor(shape, dtype_of<T>(), layout, shards);
}

// `values` on each of `mesh`'s two devices under `layout` (replicated or partial, rank 1).
DTensor on_each_device(const Mesh& mesh, const Layout& layout, const std::vector<float>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<Tensor> shards;
  for (int64_t id = 0; id < 2; ++id) {
    Tensor host = Tensor::empty({n}, DType::kF32);
    std::copy(values.begin(), values.end(), host.data<float>());
    shards.push_back(on_device(host, Device{mesh.device_type(), id}));
  }
  return DTensor({n}, DType::kF32, layout, shards);
}

Mesh gpu_mesh() { return Mesh::create({{"batch", 2}}, DeviceType::kGPU); }
Mesh cpu_mesh() { return Mesh::create({{"batch", 2}}, DeviceType::kCPU); }

DTensor logits(const Mesh& mesh) {
  return two_shards<float>(mesh, {4, 3}, std::vector<float>(12, 0.5f));
}

}  // namespace

TEST_CASE("the label check of sparse_softmax_cross_entropy reads two scalars per device shard") {
  TransferEntries device(true, /*with_kernels=*/true);
  const Mesh mesh = gpu_mesh();
  const DTensor x = logits(mesh);
  const DTensor labels = two_shards<int32_t>(mesh, {4}, {0, 2, 1, 2});
  const int before = transfers;
  // The labels pass the check; the loss kernel itself has no GPU entry here.
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(x, labels), UnimplementedError,
      Message("[sparse_softmax_cross_entropy] has no GPU kernel in this build"));
  CHECK(transfers - before == 4);  // min and max of each shard
}

TEST_CASE("a bad label on a GPU mesh gets the CPU's error, naming its global position") {
  const std::string expected =
      "[sparse_softmax_cross_entropy] label 7 at position [3] is outside [0, 3)";
  const std::vector<int32_t> labels{0, 2, 1, 7};
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(logits(cpu_mesh()), two_shards(cpu_mesh(), {4}, labels)),
      InvalidArgumentError, Message(expected));
  TransferEntries device(true, /*with_kernels=*/true);
  const DTensor x = logits(gpu_mesh());
  const DTensor bad = two_shards(gpu_mesh(), {4}, labels);
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(x, bad), InvalidArgumentError,
                       Message(expected));
}

TEST_CASE("DVariable::assign_add and assign_sub add on the device") {
  TransferEntries device(true, /*with_kernels=*/true);
  const Mesh mesh = gpu_mesh();
  DVariable v(two_shards<float>(mesh, {4}, {1, 2, 3, 4}), "v");
  v.assign_add(two_shards<float>(mesh, {4}, {10, 20, 30, 40}));
  v.assign_sub(two_shards<float>(mesh, {4}, {1, 1, 1, 1}));
  const int before = transfers;
  std::vector<float> got;
  const DTensor value = v.value();
  for (const Tensor& shard : value.shards()) {
    const Tensor host = host_readable(shard);
    got.insert(got.end(), host.data<float>(), host.data<float>() + host.num_elements());
  }
  CHECK(got == std::vector<float>{10, 21, 32, 43});
  CHECK(transfers - before == 2);  // only the reads of this test
}

TEST_CASE("mul of a partial sum checks its factor's values on the device") {
  TransferEntries device(true, /*with_kernels=*/true);
  const Mesh mesh = gpu_mesh();
  const Layout partial({"unsharded"}, mesh, {{"batch", ReduceOp::kSum}});
  const DTensor p = on_each_device(mesh, partial, {1, 2});
  const Layout replicated = Layout::replicated(mesh, 1);
  const DTensor finite = on_each_device(mesh, replicated, {3, 4});
  const DTensor infinite = on_each_device(mesh, replicated, {3, INFINITY});
  // A finite factor passes the partial sum through: each device's term times the factor, one
  // scalar read back per device and no collective.
  int before = transfers;
  const DTensor y = mul(p, finite);
  CHECK(y.layout() == partial);
  CHECK(transfers - before == 2);
  // An infinite factor needs the sum first (the first device's scalar says so): an all-reduce,
  // which this GPU mesh has no backend for.
  before = transfers;
  CHECK_THROWS_WITH(mul(p, infinite),
                    Catch::Contains("no collective backend is registered for GPU devices"));
  CHECK(transfers - before == 1);
}
