// Processes that disagree on a collective (run under mpirun with 2 and 4 processes, through MPI's
// own collectives and through the shared-memory reducer): the last process makes a different
// call from the others, and every process throws CommunicationError naming the collective, its
// own call and a disagreeing one, then goes on in step with the others.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/collective_agreement.h"
#include "runtime/error.h"
#include "runtime/mpi/mpi_backend.h"
#include "runtime/mpi/test_groups.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

namespace {

using dtensor::testing::everyone;

bool is_last() { return this_process().index == this_process().count - 1; }

// The error every process gets when the last process calls `odd` and the others `usual`.
std::string disagreement(const std::string& usual_function, const std::string& odd_function,
                         const std::string& usual, const std::string& odd) {
  const int64_t self = this_process().index;
  const int64_t last = this_process().count - 1;
  return "[" + (is_last() ? odd_function : usual_function) +
         "] the processes disagree on a collective: process " + std::to_string(self) +
         " (this one) calls " + (is_last() ? odd : usual) + ", process " +
         std::to_string(is_last() ? 0 : last) + " calls " + (is_last() ? usual : odd) +
         "; every process must make the same collective calls, with the same shapes, dtypes "
         "and op, in the same order";
}

std::string disagreement(const std::string& function, const std::string& usual,
                         const std::string& odd) {
  return disagreement(function, function, usual, odd);
}

Tensor filled(const Shape& shape, DType dtype = DType::kF32) {
  Tensor t = Tensor::zeros(shape, dtype);
  if (dtype == DType::kF32) {
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = 1.0f;
  }
  return t;
}

// Every process is still in step: a normal all-reduce sums what each contributes.
void check_in_step(CollectiveBackend& backend) {
  const Tensor sum = backend.all_reduce(everyone(), {filled({5})}, ReduceOp::kSum)[0];
  for (int64_t i = 0; i < 5; ++i) {
    REQUIRE(sum.data<float>()[i] == static_cast<float>(this_process().count));
  }
}

}  // namespace

TEST_CASE("all-reduces whose sizes differ by one element throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({is_last() ? 11 : 10});
  CHECK_THROWS_AS(backend->all_reduce(everyone(), {in}, ReduceOp::kSum), CommunicationError);
  CHECK_THROWS_WITH(
      backend->all_reduce(everyone(), {in}, ReduceOp::kSum),
      disagreement("all_reduce", "all_reduce(sum) of f32 [10]", "all_reduce(sum) of f32 [11]"));
  check_in_step(*backend);
}

TEST_CASE("all-reduces of f64 on one process and f32 on the others throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({6}, is_last() ? DType::kF64 : DType::kF32);
  CHECK_THROWS_WITH(
      backend->all_reduce(everyone(), {in}, ReduceOp::kSum),
      disagreement("all_reduce", "all_reduce(sum) of f32 [6]", "all_reduce(sum) of f64 [6]"));
  check_in_step(*backend);
}

TEST_CASE("an all-reduce with max on one process and sum on the others throws on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const ReduceOp op = is_last() ? ReduceOp::kMax : ReduceOp::kSum;
  CHECK_THROWS_WITH(
      backend->all_reduce(everyone(), {filled({3})}, op),
      disagreement("all_reduce", "all_reduce(sum) of f32 [3]", "all_reduce(max) of f32 [3]"));
  check_in_step(*backend);
}

TEST_CASE("overlapped buckets of different tensors throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const std::vector<Tensor> usual = {filled({100}), filled({3}), filled({7})};
  const std::vector<Tensor> odd = {filled({100}), filled({10})};
  std::vector<std::vector<Tensor>> inputs;
  for (const Tensor& t : is_last() ? odd : usual) inputs.push_back({t});
  // Thrown by all_reduce_start when it agrees on the caller's thread, by wait() when the
  // communication thread does.
  CHECK_THROWS_WITH(
      backend->all_reduce_start(everyone(), inputs, ReduceOp::kSum)->wait(),
      disagreement("all_reduce_start", describe_all_reduce_start(usual, ReduceOp::kSum).to_string(),
                   describe_all_reduce_start(odd, ReduceOp::kSum).to_string()));
  check_in_step(*backend);
}

TEST_CASE("all-gathers whose other dims differ throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({4, is_last() ? 4 : 3});
  CHECK_THROWS_AS(backend->all_gather(everyone(), {in}, 0), CommunicationError);
  CHECK_THROWS_WITH(backend->all_gather(everyone(), {in}, 0),
                    disagreement("all_gather", "all_gather(axis 0) of f32 [4,3]",
                                 "all_gather(axis 0) of f32 [4,4]"));
  // Sizes along the gathered axis may differ.
  const Tensor uneven = filled({is_last() ? 1 : 2, 3});
  const Tensor out = backend->all_gather(everyone(), {uneven}, 0)[0];
  CHECK(out.shape() == Shape{2 * this_process().count - 1, 3});
  check_in_step(*backend);
}

TEST_CASE("all-to-alls whose sizes differ throw a CommunicationError on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({is_last() ? 6 : 8, 2});
  CHECK_THROWS_AS(backend->all_to_all(everyone(), {in}, 0, 1), CommunicationError);
  CHECK_THROWS_WITH(
      backend->all_to_all(everyone(), {in}, 0, 1),
      disagreement("all_to_all", "all_to_all(split axis 0, concat axis 1) of f32 [8,2]",
                   "all_to_all(split axis 0, concat axis 1) of f32 [6,2]"));
  // Sizes along the concatenated axis may differ.
  const Tensor uneven = filled({8, is_last() ? 1 : 2});
  const Tensor out = backend->all_to_all(everyone(), {uneven}, 0, 1)[0];
  CHECK(out.dim(1) == 2 * this_process().count - 1);
  check_in_step(*backend);
}

TEST_CASE("reduce-scatters of different sizes throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({is_last() ? 9 : 8});
  CHECK_THROWS_WITH(backend->reduce_scatter(everyone(), {in}, ReduceOp::kSum, 0),
                    disagreement("reduce_scatter", "reduce_scatter(sum, axis 0) of f32 [8]",
                                 "reduce_scatter(sum, axis 0) of f32 [9]"));
  check_in_step(*backend);
}

TEST_CASE("broadcasts from different roots throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({3});
  const int64_t root = is_last() ? 1 : 0;
  const int64_t self = this_process().index;
  const Tensor* mine = self == root ? &in : nullptr;
  // The description of the other side's call, as that side makes it.
  const int64_t other = is_last() ? 0 : this_process().count - 1;
  const int64_t other_root = is_last() ? 0 : 1;
  const Tensor* theirs = other == other_root ? &in : nullptr;
  const std::string usual = describe_broadcast(is_last() ? theirs : mine, 0).to_string();
  const std::string odd = describe_broadcast(is_last() ? mine : theirs, 1).to_string();
  CHECK_THROWS_WITH(backend->broadcast(everyone(), {in}, root),
                    disagreement("broadcast", usual, odd));
  check_in_step(*backend);
}

TEST_CASE("an all-reduce on some processes and an all-gather on another throw on every process") {
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const Tensor in = filled({4});
  if (is_last()) {
    CHECK_THROWS_WITH(backend->all_gather(everyone(), {in}, 0),
                      disagreement("all_reduce", "all_gather", "all_reduce(sum) of f32 [4]",
                                   "all_gather(axis 0) of f32 [4]"));
  } else {
    CHECK_THROWS_WITH(backend->all_reduce(everyone(), {in}, ReduceOp::kSum),
                      disagreement("all_reduce", "all_gather", "all_reduce(sum) of f32 [4]",
                                   "all_gather(axis 0) of f32 [4]"));
  }
  backend->barrier(everyone());
  check_in_step(*backend);
}
