#include "dtensor/collectives.h"

#include "runtime/hierarchical_backend.h"

#include <catch2/catch.hpp>

#include <numeric>

using namespace dtensor;
using Catch::Message;

namespace {

Tensor iota(const Shape& shape, float start) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* d = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) d[i] = start + static_cast<float>(i);
  return t;
}

std::vector<float> values(const Tensor& t) {
  const float* d = t.data<float>();
  return std::vector<float>(d, d + t.num_elements());
}

}  // namespace

TEST_CASE("all_reduce sums every group and stores the result once") {
  Mesh mesh = Mesh::create({{"x", 2}, {"y", 2}}, DeviceType::kCPU);
  std::vector<Tensor> shards;
  for (int d = 0; d < 4; ++d) shards.push_back(iota({3}, 10.0f * d));
  reset_collective_stats();
  // Groups along y: {0,1} and {2,3}.
  auto out = all_reduce(mesh, mesh.mask({"y"}), shards, ReduceOp::kSum);
  CHECK(values(out[0]) == std::vector<float>{10, 12, 14});
  CHECK(values(out[3]) == std::vector<float>{50, 52, 54});
  CHECK(out[0].shares_storage_with(out[1]));
  CHECK_FALSE(out[0].shares_storage_with(out[2]));
  auto maxed = all_reduce(mesh, mesh.mask({"x", "y"}), shards, ReduceOp::kMax);
  CHECK(values(maxed[1]) == std::vector<float>{30, 31, 32});
  CollectiveStats s = collective_stats();
  CHECK(s.count(CollectiveKind::kAllReduce) == 2);  // once per call, not per group
  CHECK(s.bytes == 2 * 4 * 3 * 4);
}

TEST_CASE("large all_reduce splits over the thread pool and stays exact") {
  Mesh mesh = Mesh::create({{"d", 8}}, DeviceType::kCPU);
  std::vector<Tensor> shards;
  for (int d = 0; d < 8; ++d) shards.push_back(iota({300001}, static_cast<float>(d)));
  auto out = all_reduce(mesh, 1, shards, ReduceOp::kSum);
  const float* r = out[5].data<float>();
  for (int64_t i : {int64_t{0}, int64_t{77777}, int64_t{300000}}) {
    CHECK(r[i] == 8.0f * static_cast<float>(i) + 28.0f);
  }
}

TEST_CASE("all_gather concatenates uneven pieces in group order") {
  Mesh mesh = Mesh::create({{"d", 3}}, DeviceType::kCPU);
  std::vector<Tensor> shards = {iota({2, 2}, 0), iota({1, 2}, 10), iota({0, 2}, 20)};
  auto out = all_gather(mesh, 1, shards, 0);
  CHECK(out[2].shape() == Shape{3, 2});
  CHECK(values(out[2]) == std::vector<float>{0, 1, 2, 3, 10, 11});
  auto cols = all_gather(mesh, 1, {iota({2, 1}, 0), iota({2, 2}, 10), iota({2, 1}, 20)}, 1);
  CHECK(values(cols[0]) == std::vector<float>{0, 10, 11, 20, 1, 12, 13, 21});
}

TEST_CASE("reduce_scatter gives each member its chunk of the sum") {
  Mesh mesh = Mesh::create({{"d", 3}}, DeviceType::kCPU);
  std::vector<Tensor> shards = {iota({5}, 0), iota({5}, 100), iota({5}, 200)};
  auto out = reduce_scatter(mesh, 1, shards, ReduceOp::kSum, 0);
  // Chunks of ceil(5/3) = 2: [0,2), [2,4), [4,5).
  CHECK(values(out[0]) == std::vector<float>{300, 303});
  CHECK(values(out[1]) == std::vector<float>{306, 309});
  CHECK(values(out[2]) == std::vector<float>{312});
}

TEST_CASE("all_to_all moves chunk j of every member to member j") {
  Mesh mesh = Mesh::create({{"d", 2}}, DeviceType::kCPU);
  // Rows-sharded [4,3] -> columns-sharded: member j gets columns chunk j of both row blocks.
  std::vector<Tensor> shards = {iota({2, 3}, 0), iota({2, 3}, 6)};
  auto out = all_to_all(mesh, 1, shards, /*split_axis=*/1, /*concat_axis=*/0);
  CHECK(out[0].shape() == Shape{4, 2});
  CHECK(values(out[0]) == std::vector<float>{0, 1, 3, 4, 6, 7, 9, 10});
  CHECK(out[1].shape() == Shape{4, 1});
  CHECK(values(out[1]) == std::vector<float>{2, 5, 8, 11});
}

TEST_CASE("broadcast shares the root's buffer; size-1 groups pass through uncounted") {
  Mesh mesh = Mesh::create({{"x", 4}, {"y", 1}}, DeviceType::kCPU);
  std::vector<Tensor> shards;
  for (int d = 0; d < 4; ++d) shards.push_back(iota({2}, 10.0f * d));
  auto out = broadcast(mesh, mesh.mask({"x"}), shards, 2);
  for (int d = 0; d < 4; ++d) {
    CHECK(out[d].shares_storage_with(shards[2]));
    CHECK(out[d].device().id == shards[d].device().id);
  }
  reset_collective_stats();
  auto same = all_reduce(mesh, mesh.mask({"y"}), shards, ReduceOp::kSum);
  CHECK(same[1].shares_storage_with(shards[1]));
  CHECK(collective_stats().total() == 0);
  barrier(mesh);
  CHECK(collective_stats().count(CollectiveKind::kBarrier) == 1);
}

TEST_CASE("collectives reject bad input with the exact error") {
  Mesh mesh = Mesh::create({{"d", 2}}, DeviceType::kCPU);
  CHECK_THROWS_MATCHES(all_reduce(mesh, 1, {iota({2}, 0)}, ReduceOp::kSum), InvalidArgumentError,
                       Message("[all_reduce] got 1 shards for the 2 local devices of mesh d=2"));
  CHECK_THROWS_MATCHES(all_gather(mesh, 1, {iota({2}, 0), iota({2}, 0)}, 1), ShapeError,
                       Message("[all_gather] axis 1 is out of range for shard f32[2]@CPU:0"));
  CHECK_THROWS_MATCHES(
      all_to_all(mesh, 1, {iota({2}, 0), Tensor::zeros({2}, DType::kF64)}, 0, 0), ShapeError,
      Message("[all_to_all] shards f32[2]@CPU:0 and f64[2]@CPU:0 differ in dtype or rank"));
  CHECK_THROWS_MATCHES(broadcast(mesh, 1, {iota({2}, 0), iota({2}, 0)}, 2), InvalidArgumentError,
                       Message("[broadcast] root 2 is not a position in groups of 2"));
}

TEST_CASE("a mesh's collectives go to the backend of its device type and process layout") {
  Mesh one = Mesh::create({{"d", 2}}, DeviceType::kCPU);
  Mesh spanning = Mesh::create({{"d", 4}}, DeviceType::kCPU, 0, 2);
  CHECK(collective_backend_for(one).name() == "in-process");
  CHECK(collective_backend_for(spanning).name() == "in-process");
  register_collective_backends(DeviceType::kCPU, make_in_process_backend(),
                               make_in_process_backend());
  CHECK(collective_backend_for(one).name() == "in-process");
  CHECK(collective_backend_for(spanning).name() == "hierarchical(in-process, in-process)");
  reset_collective_backends();
  CHECK(collective_backend_for(spanning).name() == "in-process");
}

TEST_CASE("a device type without a collective backend is an error naming it and the collective") {
  Mesh gpus = Mesh::create({{"batch", 2}, {"model", 2}}, DeviceType::kGPU);
  std::vector<Tensor> shards(4, iota({2}, 0));
  CHECK_THROWS_MATCHES(all_reduce(gpus, gpus.mask({"batch"}), shards, ReduceOp::kSum),
                       UnimplementedError,
                       Message("[all_reduce] no collective backend is registered for GPU devices "
                               "(mesh batch=2,model=2); register one with "
                               "register_collective_backends"));
  CHECK_THROWS_MATCHES(all_to_all(gpus, gpus.mask({"model"}), shards, 0, 0), UnimplementedError,
                       Message("[all_to_all] no collective backend is registered for GPU devices "
                               "(mesh batch=2,model=2); register one with "
                               "register_collective_backends"));
  CHECK_THROWS_MATCHES(barrier(gpus), UnimplementedError,
                       Message("[barrier] no collective backend is registered for GPU devices "
                               "(mesh batch=2,model=2); register one with "
                               "register_collective_backends"));
  // Groups of one device need no backend.
  CHECK(all_reduce(gpus, 0, shards, ReduceOp::kSum)[3].shares_storage_with(shards[3]));
}

TEST_CASE("registering backends rejects an inter-process backend without an intra-process one") {
  CHECK_THROWS_MATCHES(
      register_collective_backends(DeviceType::kGPU, nullptr, make_in_process_backend()),
      InvalidArgumentError,
      Message("[register_collective_backends] GPU has an inter-process backend (in-process) but "
              "no intra-process one to compose it with"));
  CHECK_THROWS_MATCHES(make_hierarchical_backend(make_in_process_backend(), nullptr),
                       InvalidArgumentError,
                       Message("[make_hierarchical_backend] the inter-process backend is null"));
  CHECK_THROWS_MATCHES(make_hierarchical_backend(nullptr, make_in_process_backend()),
                       InvalidArgumentError,
                       Message("[make_hierarchical_backend] the intra-process backend is null"));
  // A GPU registration serves GPU meshes only; reset drops it.
  register_collective_backends(DeviceType::kGPU, make_in_process_backend(), nullptr);
  CHECK(collective_backend_for(Mesh::create({{"d", 2}}, DeviceType::kGPU)).name() == "in-process");
  reset_collective_backends();
  CHECK_THROWS_AS(collective_backend_for(Mesh::create({{"d", 2}}, DeviceType::kGPU)),
                  UnimplementedError);
}

TEST_CASE("the in-process backend refuses groups that span processes") {
  // Process 0 of 2 owns devices 0 and 1 of 4.
  Mesh mesh = Mesh::create({{"d", 4}}, DeviceType::kCPU, 0, 2);
  CHECK_THROWS_MATCHES(
      all_reduce(mesh, 1, {iota({2}, 0), iota({2}, 0)}, ReduceOp::kSum), CommunicationError,
      Message("[all_reduce] device 2 belongs to process 1; the in-process backend needs every "
              "member of a group in this process (launch with mpirun to use the MPI backend)"));
}

TEST_CASE("share_result shares a buffer only within one memory space") {
  const Tensor result = iota({2}, 1.0f);
  const Tensor cpu3 = Tensor::zeros({2}, DType::kF32, Device{DeviceType::kCPU, 3});
  std::vector<Tensor> shared = share_result(result, {result, cpu3});
  REQUIRE(shared.size() == 2);
  CHECK(shared[1].shares_storage_with(result));
  CHECK(shared[1].device() == Device{DeviceType::kCPU, 3});
  // A GPU member has its own memory: a backend for GPUs returns one result per member instead.
  const Tensor gpu1 = Tensor::zeros({2}, DType::kF32).with_device(Device{DeviceType::kGPU, 1});
  CHECK_THROWS_MATCHES(share_result(result, {result, gpu1}), InternalError,
                       Message("[share_result] " + result.to_string() +
                               " on CPU:0 cannot be shared with GPU:1: another memory space"));
}
