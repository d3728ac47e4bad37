// The collectives on GPU meshes of logical devices, against the CPU in-process backend on the
// same data: every collective, sum/max/min, every dtype, uneven sizes with empty chunks, meshes
// {8}, {2,4} and {2,2,2} with groups along every subset of dims. Results must be bit-identical
// (both reduce in the same pairwise order) and on each member's own device. Skips with one line
// without a GPU (gpu_test_main.cc).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dtensor/collectives.h"
#include "mesh/mesh.h"
#include "runtime/backend_registry.h"
#include "runtime/cuda/gpu_collectives.h"
#include "runtime/cuda/transfer.h"

using namespace dtensor;

namespace {

Tensor member_data(const Shape& shape, int64_t device, int salt, DType dtype) {
  Tensor f = Tensor::empty(shape, DType::kF64);
  for (int64_t e = 0; e < f.num_elements(); ++e) {
    // Small integers: sums of a few members stay exact in bf16.
    const int64_t x = (device * 7 + e * 3 + salt * 5) % 16;
    f.data<double>()[e] = dtype == DType::kBool ? static_cast<double>(x % 2) : x - 5.0;
  }
  Tensor t = Tensor::empty(shape, dtype, Device{DeviceType::kCPU, device});
  for (int64_t e = 0; e < f.num_elements(); ++e) {
    const double x = f.data<double>()[e];
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[e] = static_cast<float>(x);
        break;
      case DType::kF64:
        t.data<double>()[e] = x;
        break;
      case DType::kBF16:
        t.data<BFloat16>()[e] = BFloat16(static_cast<float>(x));
        break;
      case DType::kI32:
        t.data<int32_t>()[e] = static_cast<int32_t>(x);
        break;
      case DType::kI64:
        t.data<int64_t>()[e] = static_cast<int64_t>(x);
        break;
      case DType::kBool:
        t.data<bool>()[e] = x != 0;
        break;
    }
  }
  return t;
}

// Shards of every local device: rows differ per device (uneven, some empty) when `uneven`.
std::vector<Tensor> shards_of(const Mesh& mesh, const Shape& shape, int salt, DType dtype,
                              bool uneven) {
  std::vector<Tensor> out;
  for (int64_t id : mesh.local_device_ids()) {
    Shape s = shape;
    if (uneven) s[0] = id % 3;
    Tensor t = member_data(s, id, salt, dtype);
    out.push_back(mesh.device_type() == DeviceType::kCPU
                      ? t.with_device(Device{DeviceType::kCPU, id})
                      : cuda::to_device(t, Device{DeviceType::kGPU, id}));
  }
  return out;
}

void check_same(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu,
                const std::string& what) {
  INFO(what);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    CHECK(gpu[i].device() == Device{DeviceType::kGPU, cpu[i].device().id});
    CHECK(bitwise_equal(cuda::to_host(gpu[i]), cpu[i]));
  }
}

}  // namespace

TEST_CASE("GPU collectives equal the CPU in-process backend's, bit for bit") {
  cuda::register_gpu_collectives();
  const std::vector<std::vector<MeshDim>> meshes = {
      {{"a", 8}}, {{"a", 2}, {"b", 4}}, {{"a", 2}, {"b", 2}, {"c", 2}}};
  const DType dtypes[] = {DType::kF32, DType::kF64, DType::kBF16,
                          DType::kI32, DType::kI64, DType::kBool};
  for (const auto& dims : meshes) {
    const Mesh cpu = Mesh::create(dims, DeviceType::kCPU);
    const Mesh gpu = Mesh::create(dims, DeviceType::kGPU);
    for (MeshDimMask mask = 1; mask < (MeshDimMask{1} << cpu.rank()); ++mask) {
      for (DType dt : dtypes) {
        const std::string where =
            gpu.dims_string() + " mask " + std::to_string(mask) + " " + std::string(dtype_name(dt));
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          if (dt == DType::kBool && op == ReduceOp::kSum) continue;
          check_same(all_reduce(gpu, mask, shards_of(gpu, {5, 3}, 1, dt, false), op),
                     all_reduce(cpu, mask, shards_of(cpu, {5, 3}, 1, dt, false), op),
                     "all_reduce " + where);
          check_same(reduce_scatter(gpu, mask, shards_of(gpu, {7, 2}, 2, dt, false), op, 0),
                     reduce_scatter(cpu, mask, shards_of(cpu, {7, 2}, 2, dt, false), op, 0),
                     "reduce_scatter " + where);
        }
        check_same(all_gather(gpu, mask, shards_of(gpu, {3, 4}, 3, dt, true), 0),
                   all_gather(cpu, mask, shards_of(cpu, {3, 4}, 3, dt, true), 0),
                   "all_gather uneven " + where);
        check_same(all_gather(gpu, mask, shards_of(gpu, {2, 3}, 4, dt, false), 1),
                   all_gather(cpu, mask, shards_of(cpu, {2, 3}, 4, dt, false), 1),
                   "all_gather axis 1 " + where);
        check_same(all_to_all(gpu, mask, shards_of(gpu, {4, 9}, 5, dt, false), 1, 0),
                   all_to_all(cpu, mask, shards_of(cpu, {4, 9}, 5, dt, false), 1, 0),
                   "all_to_all " + where);
        check_same(broadcast(gpu, mask, shards_of(gpu, {6}, 6, dt, false), 1),
                   broadcast(cpu, mask, shards_of(cpu, {6}, 6, dt, false), 1),
                   "broadcast " + where);
      }
    }
    barrier(gpu);
  }
  reset_collective_backends();
}

TEST_CASE("with no explicit registration, GPU collectives come from the CUDA backend") {
  // The CUDA GPU backend supplies its in-process collectives (GpuBackend::make_collectives,
  // runtime/cuda:cuda_backend_collectives), so a reset registry still serves GPU meshes.
  reset_collective_backends();
  const Mesh gpu = Mesh::create({{"a", 2}}, DeviceType::kGPU);
  const Mesh cpu = Mesh::create({{"a", 2}}, DeviceType::kCPU);
  check_same(all_reduce(gpu, 1, shards_of(gpu, {2}, 0, DType::kF32, false), ReduceOp::kSum),
             all_reduce(cpu, 1, shards_of(cpu, {2}, 0, DType::kF32, false), ReduceOp::kSum),
             "all_reduce with the backend's own collectives");
  reset_collective_backends();
}
