// The MPI backend's all-reduce among processes of one host (run under mpirun with 2 and 4
// processes, all on this host): it goes through shared memory, folds in process order, gives
// buckets the bits of the blocking call, and throws on every process when their tensors differ.
#include "runtime/mpi/mpi_backend.h"
#include "runtime/mpi/test_groups.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

namespace {

using dtensor::testing::everyone;

// Process p's value of element i: large terms of both signs and small ones, so that the order
// of the sum shows in its bits.
float value(int64_t p, int64_t i) {
  switch ((p + i) % 4) {
    case 0:
      return 1e8f + static_cast<float>(i);
    case 1:
      return 1.0f + 0.25f * static_cast<float>(i % 7);
    case 2:
      return -1e8f;
    default:
      return 3.0f - 0.5f * static_cast<float>(i % 5);
  }
}

Tensor mine(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(this_process().index, i);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("all-reduce among processes of one host folds in process order through shared memory") {
  const int64_t processes = this_process().count;
  REQUIRE(processes >= 2);
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Group group = everyone();
  const int64_t n = 1000;
  const int64_t before = shared_memory_reductions();
  const Tensor sum = backend->all_reduce(group, {mine(n)}, ReduceOp::kSum)[0];
  CHECK(shared_memory_reductions() == before + 1);
  for (int64_t i = 0; i < n; ++i) {
    float want = value(0, i);
    for (int64_t p = 1; p < processes; ++p) want += value(p, i);
    INFO("element " << i);
    REQUIRE(sum.data<float>()[i] == want);
  }

  // A bucket started on the communication thread gives the blocking call's bits.
  std::unique_ptr<PendingCollective> pending =
      backend->all_reduce_start(group, {{mine(n)}, {mine(3)}, {mine(n)}}, ReduceOp::kSum);
  const std::vector<std::vector<Tensor>> bucket = pending->wait();
  CHECK(shared_memory_reductions() == before + 2);
  CHECK(same_bits(bucket[0][0], sum));
  CHECK(same_bits(bucket[2][0], sum));
  CHECK(same_bits(bucket[1][0], backend->all_reduce(group, {mine(3)}, ReduceOp::kSum)[0]));
}

TEST_CASE("all-reduce among processes of one host throws on every process when shapes differ") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Group group = everyone();
  const int64_t n = this_process().index == 0 ? 10 : 11;
  CHECK_THROWS_AS(backend->all_reduce(group, {mine(n)}, ReduceOp::kSum), CommunicationError);
  const int64_t self = this_process().index;
  const int64_t other = self == 0 ? 1 : 0;  // the first process whose call differs
  CHECK_THROWS_WITH(backend->all_reduce(group, {mine(n)}, ReduceOp::kSum),
                    "[all_reduce] the processes disagree on a collective: process " +
                        std::to_string(self) + " (this one) calls all_reduce(sum) of f32 [" +
                        std::to_string(n) + "], process " + std::to_string(other) +
                        " calls all_reduce(sum) of f32 [" + std::to_string(self == 0 ? 11 : 10) +
                        "]; every process must make the same collective calls, with the same "
                        "shapes, dtypes and op, in the same order");
  // Every process stays in step: the next call reduces normally.
  const Tensor sum = backend->all_reduce(group, {mine(4)}, ReduceOp::kMax)[0];
  CHECK(sum.num_elements() == 4);
}
