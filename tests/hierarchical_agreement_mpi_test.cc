// Processes that disagree on a collective over groups with two members in each process (run
// under mpirun with 2 and 4 processes): the in-process backend composed with MPI. The last
// process's members make a different call from the others', and every process throws
// CommunicationError naming the collective and both calls, then goes on in step.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/mesh_backend.h"
#include "mesh/mesh.h"
#include "runtime/collective_backend.h"
#include "runtime/error.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

namespace {

constexpr int64_t kPerProcess = 2;

Mesh two_per_process() {
  const ProcessInfo p = this_process();
  return Mesh::create({{"x", kPerProcess * p.count}}, DeviceType::kCPU, p.index, p.count);
}

// Members in process order (0, 1 | 2, 3 | ...), or interleaving processes (0, 2, 4, ... | 1, 3,
// ...): the hierarchical backend's staged and general paths.
Group group_of(bool interleaved) {
  const ProcessInfo p = this_process();
  Group g{{}, {}, p.index};
  for (int64_t i = 0; i < kPerProcess * p.count; ++i) {
    const int64_t owner = interleaved ? i % p.count : i / kPerProcess;
    const int64_t local = interleaved ? i / p.count : i % kPerProcess;
    g.devices.push_back(owner * kPerProcess + local);
    g.owners.push_back(owner);
  }
  return g;
}

bool is_last() { return this_process().index == this_process().count - 1; }

// This process's members' tensors, each `shape` (the last process's `odd` instead).
std::vector<Tensor> members(const Group& group, const Shape& shape, const Shape& odd) {
  std::vector<Tensor> out;
  for (int64_t j : group.local_positions()) {
    out.push_back(Tensor::zeros(is_last() ? odd : shape, DType::kF32,
                                Device{DeviceType::kCPU, group.devices[static_cast<size_t>(j)]}));
  }
  return out;
}

std::string disagreement(const std::string& function, const std::string& usual,
                         const std::string& odd) {
  const int64_t self = this_process().index;
  const int64_t last = this_process().count - 1;
  return "[" + function + "] the processes disagree on a collective: process " +
         std::to_string(self) + " (this one) calls " + (is_last() ? odd : usual) + ", process " +
         std::to_string(is_last() ? 0 : last) + " calls " + (is_last() ? usual : odd) +
         "; every process must make the same collective calls, with the same shapes, dtypes "
         "and op, in the same order";
}

void check_in_step(CollectiveBackend& backend) {
  const Group group = group_of(false);
  const std::vector<Tensor> out =
      backend.all_reduce(group, members(group, {3}, {3}), ReduceOp::kSum);
  REQUIRE(out.size() == static_cast<size_t>(kPerProcess));
}

}  // namespace

TEST_CASE("all-to-alls over two members per process whose sizes differ throw on every process") {
  const Mesh mesh = two_per_process();
  CollectiveBackend& backend = collective_backend_for(mesh);
  const Group group = group_of(false);
  CHECK_THROWS_AS(backend.all_to_all(group, members(group, {8, 2}, {6, 2}), 0, 1),
                  CommunicationError);
  CHECK_THROWS_WITH(
      backend.all_to_all(group, members(group, {8, 2}, {6, 2}), 0, 1),
      disagreement("all_to_all", "all_to_all(split axis 0, concat axis 1) of f32 [8,2]",
                   "all_to_all(split axis 0, concat axis 1) of f32 [6,2]"));
  check_in_step(backend);
}

TEST_CASE("all-gathers over interleaved members whose other dims differ throw on every process") {
  const Mesh mesh = two_per_process();
  CollectiveBackend& backend = collective_backend_for(mesh);
  const Group group = group_of(true);
  CHECK_THROWS_WITH(backend.all_gather(group, members(group, {4, 3}, {4, 4}), 0),
                    disagreement("all_gather", "all_gather(axis 0) of f32 [4,3]",
                                 "all_gather(axis 0) of f32 [4,4]"));
  check_in_step(backend);
}

TEST_CASE("all-gathers over members in process order whose other dims differ throw everywhere") {
  const Mesh mesh = two_per_process();
  CollectiveBackend& backend = collective_backend_for(mesh);
  const Group group = group_of(false);
  // Each process concatenates its members first: the processes' blocks disagree.
  CHECK_THROWS_WITH(backend.all_gather(group, members(group, {4, 3}, {4, 4}), 0),
                    disagreement("all_gather", "all_gather(axis 0) of f32 [8,3]",
                                 "all_gather(axis 0) of f32 [8,4]"));
  check_in_step(backend);
}

TEST_CASE("all-reduces over two members per process whose sizes differ throw on every process") {
  const Mesh mesh = two_per_process();
  CollectiveBackend& backend = collective_backend_for(mesh);
  const Group group = group_of(false);
  CHECK_THROWS_WITH(
      backend.all_reduce(group, members(group, {10}, {11}), ReduceOp::kSum),
      disagreement("all_reduce", "all_reduce(sum) of f32 [10]", "all_reduce(sum) of f32 [11]"));
  check_in_step(backend);
}
