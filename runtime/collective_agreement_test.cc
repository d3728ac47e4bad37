// The agreement descriptors in one process: what agrees, what does not, and the exact error.
#include "runtime/collective_agreement.h"

#include <catch2/catch.hpp>

#include "runtime/error.h"

using namespace dtensor;

namespace {

Tensor zeros(const Shape& shape, DType dtype = DType::kF32) { return Tensor::zeros(shape, dtype); }

}  // namespace

TEST_CASE("descriptors of the same call agree, others do not") {
  CHECK(describe_all_reduce(zeros({10}), ReduceOp::kSum)
            .agrees_with(describe_all_reduce(zeros({10}), ReduceOp::kSum)));
  CHECK_FALSE(describe_all_reduce(zeros({10}), ReduceOp::kSum)
                  .agrees_with(describe_all_reduce(zeros({11}), ReduceOp::kSum)));
  CHECK_FALSE(describe_all_reduce(zeros({10}), ReduceOp::kSum)
                  .agrees_with(describe_all_reduce(zeros({10}, DType::kF64), ReduceOp::kSum)));
  CHECK_FALSE(describe_all_reduce(zeros({10}), ReduceOp::kSum)
                  .agrees_with(describe_all_reduce(zeros({10}), ReduceOp::kMax)));
  CHECK_FALSE(describe_all_reduce(zeros({2, 5}), ReduceOp::kSum)
                  .agrees_with(describe_all_reduce(zeros({5, 2}), ReduceOp::kSum)));
  CHECK_FALSE(describe_all_reduce(zeros({4}), ReduceOp::kSum)
                  .agrees_with(describe_all_gather(zeros({4}), 0)));
  // Gathered and concatenated axes may differ in size, nothing else.
  CHECK(describe_all_gather(zeros({4, 3}), 0).agrees_with(describe_all_gather(zeros({5, 3}), 0)));
  CHECK_FALSE(
      describe_all_gather(zeros({4, 3}), 0).agrees_with(describe_all_gather(zeros({4, 4}), 0)));
  CHECK(describe_all_to_all(zeros({8, 2}), 0, 1)
            .agrees_with(describe_all_to_all(zeros({8, 3}), 0, 1)));
  CHECK_FALSE(describe_all_to_all(zeros({8, 2}), 0, 1)
                  .agrees_with(describe_all_to_all(zeros({6, 2}), 0, 1)));
  // A broadcast's non-root tensors are placeholders.
  const Tensor root = zeros({3});
  CHECK(describe_broadcast(&root, 1).agrees_with(describe_broadcast(nullptr, 1)));
  CHECK_FALSE(describe_broadcast(&root, 1).agrees_with(describe_broadcast(nullptr, 0)));
  // Buckets: the tensors' count, shapes and dtypes.
  CHECK(describe_all_reduce_start({zeros({3}), zeros({2})}, ReduceOp::kSum)
            .agrees_with(describe_all_reduce_start({zeros({3}), zeros({2})}, ReduceOp::kSum)));
  CHECK_FALSE(
      describe_all_reduce_start({zeros({3}), zeros({2})}, ReduceOp::kSum)
          .agrees_with(describe_all_reduce_start({zeros({2}), zeros({3})}, ReduceOp::kSum)));
  CHECK_FALSE(describe_all_reduce_start({zeros({3}), zeros({2})}, ReduceOp::kSum)
                  .agrees_with(describe_all_reduce_start({zeros({3})}, ReduceOp::kSum)));
}

TEST_CASE("descriptors read as the call they describe") {
  CHECK(describe_all_reduce(zeros({10}), ReduceOp::kMax).to_string() ==
        "all_reduce(max) of f32 [10]");
  CHECK(describe_all_gather(zeros({4, 3}, DType::kF64), 1).to_string() ==
        "all_gather(axis 1) of f64 [4,3]");
  CHECK(describe_reduce_scatter(zeros({8}), ReduceOp::kSum, 0).to_string() ==
        "reduce_scatter(sum, axis 0) of f32 [8]");
  CHECK(describe_all_to_all(zeros({8, 2}), 0, 1).to_string() ==
        "all_to_all(split axis 0, concat axis 1) of f32 [8,2]");
  const Tensor root = zeros({3});
  CHECK(describe_broadcast(&root, 0).to_string() == "broadcast(root 0) of f32 [3]");
  CHECK(describe_broadcast(nullptr, 0).to_string() == "broadcast(root 0)");
  CHECK(describe_barrier().to_string() == "barrier");
  CHECK_THAT(describe_all_reduce_start({zeros({3}), zeros({2})}, ReduceOp::kSum).to_string(),
             Catch::StartsWith("all_reduce_start(sum) of 2 tensors, 5 elements, signature "));
}

TEST_CASE("check_agreement names this process's call and the first that differs") {
  const std::vector<CollectiveDescriptor> all = {describe_all_reduce(zeros({10}), ReduceOp::kSum),
                                                 describe_all_reduce(zeros({10}), ReduceOp::kSum),
                                                 describe_all_reduce(zeros({11}), ReduceOp::kSum)};
  CHECK_NOTHROW(check_agreement("all_reduce", {all[0], all[1]}, {0, 1}, 0));
  CHECK_THROWS_AS(check_agreement("all_reduce", all, {4, 5, 6}, 1), CommunicationError);
  CHECK_THROWS_WITH(
      check_agreement("all_reduce", all, {4, 5, 6}, 1),
      "[all_reduce] the processes disagree on a collective: process 5 (this one) calls "
      "all_reduce(sum) of f32 [10], process 6 calls all_reduce(sum) of f32 [11]; every process "
      "must make the same collective calls, with the same shapes, dtypes and op, in the same "
      "order");
  CHECK_THROWS_WITH(check_agreement("all_reduce", all, {4, 5, 6}, 2),
                    Catch::Contains("process 6 (this one) calls all_reduce(sum) of f32 [11], "
                                    "process 4 calls all_reduce(sum) of f32 [10]"));
}
