// Host reads above the kernel front on the emulated GPU, counted: host_readable and on_device
// (dtensor/host_copy.h), printing, and the checks that need values (the label range check of
// sparse_softmax_cross_entropy, exact_factor of a partial product, DVariable::assign_add/sub). The
// shards live in opaque memory, so a host read on the way crashes the test; each path gives the
// CPU's results and error texts through the number of host transfers
// (emulated::host_transfers) it is meant to make. (These ran on a smaller double,
// dtensor/opaque_memory_testing.h, before the emulated GPU existed.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dtensor/host_copy.h"
#include "dtensor/print.h"
#include "dtensor/variable.h"
#include "kernels/gpu/gpu_kernels.h"
#include "ops/ops.h"
#include "runtime/emulated/transfer.h"

using namespace dtensor;
using Catch::Message;
using emulated::host_transfers;

namespace {

Tensor host_values() {
  Tensor t = Tensor::empty({3}, DType::kI32);
  for (int32_t i = 0; i < 3; ++i) t.data<int32_t>()[i] = 7 * i - 1;
  return t;
}

// `global` (rank >= 1, split along dim 0 into `mesh`'s two devices) as a DTensor on `mesh`.
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

Mesh mesh_of(DeviceType type) { return Mesh::create({{"batch", 2}}, type); }

DTensor logits(const Mesh& mesh) {
  return two_shards<float>(mesh, {4, 3}, std::vector<float>(12, 0.5f));
}

Tensor host_global(const DTensor& t) { return host_readable(to_global(t)); }

}  // namespace

TEST_CASE("host_readable and on_device move nothing for host memory") {
  const int64_t before = host_transfers();
  Tensor t = host_values();
  CHECK(host_readable(t).shares_storage_with(t));
  Tensor on_cpu3 = on_device(t, Device{DeviceType::kCPU, 3});
  CHECK(on_cpu3.shares_storage_with(t));
  CHECK(on_cpu3.device() == Device{DeviceType::kCPU, 3});
  CHECK(host_transfers() == before);
}

TEST_CASE("host_readable and on_device transfer device memory once each way") {
  const Device gpu1{DeviceType::kGPU, 1};
  const int64_t before = host_transfers();
  Tensor on_gpu = on_device(host_values(), gpu1);
  CHECK(host_transfers() - before == 1);
  CHECK(on_gpu.memory_space() == MemorySpace::kGpu);
  CHECK(on_gpu.device() == gpu1);
  Tensor back = host_readable(on_gpu);
  CHECK(host_transfers() - before == 2);
  CHECK(back.memory_space() == MemorySpace::kHost);
  CHECK(bitwise_equal(back, host_values()));
  CHECK_THROWS_MATCHES(on_device(on_gpu, gpu1), InternalError,
                       Message("[on_device] i32[3]@GPU:1 is not in host memory"));
}

TEST_CASE("host_readable of device memory without transfer entries names the transfer") {
  const Tensor on_gpu = on_device(host_values(), Device{DeviceType::kGPU, 0});
  const kernels::gpu::Table saved = kernels::gpu::registered_table;
  kernels::gpu::registered_table.copy_to_host = nullptr;
  kernels::gpu::registered_table.copy_to_gpu = nullptr;
  auto restore = [&] { kernels::gpu::registered_table = saved; };
  try {
    CHECK_THROWS_MATCHES(host_readable(on_gpu), UnimplementedError,
                         Message("[copy_to_host] has no GPU kernel in this build"));
    CHECK_THROWS_MATCHES(on_device(host_values(), Device{DeviceType::kGPU, 0}), UnimplementedError,
                         Message("[copy_to_gpu] has no GPU kernel in this build"));
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

TEST_CASE("a tensor in device memory prints from one host copy, with the host tensor's text") {
  const Tensor host = host_values().reshaped({3, 1});
  const Tensor on_gpu = on_device(host, Device{DeviceType::kGPU, 2});
  const int64_t before = host_transfers();
  std::ostringstream gpu_text, host_text;
  gpu_text << on_gpu;
  host_text << host;
  CHECK(gpu_text.str() == host_text.str());
  CHECK(host_transfers() - before == 1);
}

TEST_CASE("the label check of sparse_softmax_cross_entropy reads two scalars per device shard") {
  const Mesh mesh = mesh_of(DeviceType::kGPU);
  const DTensor x = logits(mesh);
  const DTensor labels = two_shards<int32_t>(mesh, {4}, {0, 2, 1, 2});
  const int64_t before = host_transfers();
  const DTensor loss = sparse_softmax_cross_entropy(x, labels);
  CHECK(host_transfers() - before == 4);  // min and max of each shard
  const Mesh cpu = mesh_of(DeviceType::kCPU);
  CHECK(bitwise_equal(host_global(loss),
                      to_global(sparse_softmax_cross_entropy(
                          logits(cpu), two_shards<int32_t>(cpu, {4}, {0, 2, 1, 2})))));
}

TEST_CASE("a bad label on a GPU mesh gets the CPU's error, naming its global position") {
  const std::string expected =
      "[sparse_softmax_cross_entropy] label 7 at position [3] is outside [0, 3)";
  const std::vector<int32_t> labels{0, 2, 1, 7};
  for (DeviceType type : {DeviceType::kCPU, DeviceType::kGPU}) {
    const Mesh mesh = mesh_of(type);
    CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(logits(mesh), two_shards(mesh, {4}, labels)),
                         InvalidArgumentError, Message(expected));
  }
}

TEST_CASE("DVariable::assign_add and assign_sub add on the device") {
  const Mesh mesh = mesh_of(DeviceType::kGPU);
  DVariable v(two_shards<float>(mesh, {4}, {1, 2, 3, 4}), "v");
  const int64_t before = host_transfers();
  v.assign_add(two_shards<float>(mesh, {4}, {10, 20, 30, 40}));
  v.assign_sub(two_shards<float>(mesh, {4}, {1, 1, 1, 1}));
  CHECK(host_transfers() - before == 4);  // only the puts of the two operands' shards
  std::vector<float> got;
  const DTensor value = v.value();
  for (const Tensor& shard : value.shards()) {
    const Tensor host = host_readable(shard);
    got.insert(got.end(), host.data<float>(), host.data<float>() + host.num_elements());
  }
  CHECK(got == std::vector<float>{10, 21, 32, 43});
}

TEST_CASE("mul of a partial sum checks its factor's values on the device") {
  const Mesh mesh = mesh_of(DeviceType::kGPU);
  const Layout partial({"unsharded"}, mesh, {{"batch", ReduceOp::kSum}});
  const DTensor p = on_each_device(mesh, partial, {1, 2});
  const Layout replicated = Layout::replicated(mesh, 1);
  const DTensor finite = on_each_device(mesh, replicated, {3, 4});
  const DTensor infinite = on_each_device(mesh, replicated, {3, INFINITY});
  // A finite factor passes the partial sum through: each device's term times the factor, one
  // scalar read back per device and no collective.
  int64_t before = host_transfers();
  const DTensor y = mul(p, finite);
  CHECK(y.layout() == partial);
  CHECK(host_transfers() - before == 2);
  // An infinite factor needs the sum first (the first device's scalar says so): an all-reduce on
  // the devices, then the product, as on the CPU.
  before = host_transfers();
  const DTensor z = mul(p, infinite);
  CHECK(host_transfers() - before == 1);
  const Mesh cpu = mesh_of(DeviceType::kCPU);
  const Layout cpu_partial({"unsharded"}, cpu, {{"batch", ReduceOp::kSum}});
  const DTensor cpu_z = mul(on_each_device(cpu, cpu_partial, {1, 2}),
                            on_each_device(cpu, Layout::replicated(cpu, 1), {3, INFINITY}));
  CHECK(bitwise_equal(host_global(z), to_global(cpu_z)));
}
