// Overlapped gradient reduction: GradientTape::gradient with buckets of all-reduces started
// during backward gives bitwise the gradients of the blocking path (the seed MLP on batch=8 and
// batch=2,model=4, bucket caps from tiny to the default), a captured step records the buckets'
// starts and waits and replays the same bits, and all_reduce_start itself equals all_reduce. Runs
// in one process (nothing spans processes: the blocking path) and under mpirun with 2 and 4
// processes.
#include <catch2/catch.hpp>

#include <cstring>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/variable.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/layout_enumeration.h"
#include "train/capture/function.h"

using namespace dtensor;
using Catch::Message;
using dtensor::testing::test_mesh;

namespace {

// Restores the process-wide options when a test case ends.
class OptionsGuard {
 public:
  OptionsGuard() : saved_(gradient_reduction_options()) {}
  ~OptionsGuard() { set_gradient_reduction_options(saved_); }

 private:
  GradientReductionOptions saved_;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

bool same_bits(const DTensor& a, const DTensor& b) {
  if (!(a.layout() == b.layout()) || a.shards().size() != b.shards().size()) return false;
  for (size_t i = 0; i < a.shards().size(); ++i) {
    if (!same_bits(a.shards()[i], b.shards()[i])) return false;
  }
  return true;
}

// The seed MLP (784-700-500-10, replicated weights, batch-sharded data) and one step's gradients.
struct SeedStep {
  explicit SeedStep(const Mesh& mesh)
      : images(random_uniform({128, 784}, Layout::batch_sharded(mesh, mesh.dims()[0].name, 2), 7)),
        labels(cast(random_uniform({128}, Layout::batch_sharded(mesh, mesh.dims()[0].name, 1), 8,
                                   0.0, 9.99),
                    DType::kI32)) {
    const int64_t sizes[] = {784, 700, 500, 10};
    for (int i = 0; i < 3; ++i) {
      const double limit = 1.0 / static_cast<double>(sizes[i]);
      vars.emplace_back(random_uniform({sizes[i], sizes[i + 1]}, Layout::replicated(mesh, 2),
                                       static_cast<uint64_t>(10 + i), -limit, limit),
                        "w" + std::to_string(i));
      vars.emplace_back(random_uniform({sizes[i + 1]}, Layout::replicated(mesh, 1),
                                       static_cast<uint64_t>(20 + i), -0.1, 0.1),
                        "b" + std::to_string(i));
    }
  }

  std::vector<DTensor> gradients() const {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor h = images;
    for (size_t i = 0; i < 3; ++i) {
      h = dense(h, vars[2 * i].value(), vars[2 * i + 1].value(),
                i < 2 ? DenseActivation::kRelu : DenseActivation::kNone);
    }
    return tape.gradient(reduce_mean(sparse_softmax_cross_entropy(h, labels)), vars);
  }

  DTensor images, labels;
  std::vector<DVariable> vars;
};

}  // namespace

TEST_CASE("overlapped gradient reduction equals the blocking one bit for bit", "[overlap]") {
  OptionsGuard guard;
  for (std::vector<MeshDim> dims :
       {std::vector<MeshDim>{{"batch", 8}}, std::vector<MeshDim>{{"batch", 2}, {"model", 4}}}) {
    const Mesh mesh = test_mesh(dims);
    INFO(mesh.to_string());
    SeedStep step(mesh);
    set_gradient_reduction_options({false, 25.0});
    reset_collective_stats();
    const std::vector<DTensor> blocking = step.gradients();
    const int64_t blocking_all_reduces = collective_stats().count(CollectiveKind::kAllReduce);
    // Backward finishes w2, b2, w1, b1, w0, b0 (3.6 MB in all), and the first bucket closes at
    // 1 MiB: 25 MB makes w2 b2 w1 | b1 w0 b0; 1 MB makes w2 b2 w1 | b1 w0 | b0; a tiny cap gives
    // every gradient a bucket of its own.
    for (const auto& [cap, buckets] : {std::pair<double, int64_t>{25.0, 2}, {1.0, 3}, {1e-6, 6}}) {
      INFO("bucket_cap_mb " << cap);
      set_gradient_reduction_options({true, cap});
      reset_collective_stats();
      const std::vector<DTensor> overlapped = step.gradients();
      const int64_t all_reduces = collective_stats().count(CollectiveKind::kAllReduce);
      REQUIRE(overlapped.size() == blocking.size());
      for (size_t i = 0; i < blocking.size(); ++i) {
        INFO("gradient of " << step.vars[i].name());
        // Each bucket runs the blocking path's MPI_Allreduce per tensor (or, over two processes,
        // a nonblocking one: the same two terms), so even over four processes the bits agree.
        CHECK(same_bits(overlapped[i], blocking[i]));
      }
      // Across processes the six per-variable all-reduces become `buckets` started ones.
      if (mesh.num_processes() > 1) {
        CHECK(all_reduces == blocking_all_reduces - 6 + buckets);
      } else {
        CHECK(all_reduces == blocking_all_reduces);
      }
    }
  }
}

TEST_CASE("a captured step overlaps its buckets on replay and replays the blocking bits",
          "[overlap]") {
  OptionsGuard guard;
  const Mesh mesh = test_mesh({{"batch", 8}});
  SeedStep step(mesh);
  set_gradient_reduction_options({false, 25.0});
  const std::vector<DTensor> blocking = step.gradients();
  set_gradient_reduction_options({true, 25.0});
  Function captured = function([&](const std::vector<DTensor>&) { return step.gradients(); });
  const std::vector<DTensor> no_arguments;
  for (int call = 0; call < 3; ++call) {
    INFO("call " << call << " (the first traces)");
    const std::vector<DTensor> grads = captured(no_arguments);
    REQUIRE(grads.size() == blocking.size());
    for (size_t i = 0; i < blocking.size(); ++i) CHECK(same_bits(grads[i], blocking[i]));
  }
  CHECK(captured.replay_count() == 2);
  const std::string program = captured.program_string(no_arguments);
  INFO(program);
  auto count = [&](const std::string& op) {
    int64_t n = 0;
    for (size_t at = program.find(op); at != std::string::npos; at = program.find(op, at + 1)) ++n;
    return n;
  };
  if (mesh.num_processes() > 1) {
    // Every gradient is handed to a bucket and taken back, and the first bucket starts while
    // backward still has kernels to run.
    CHECK(count("all_reduce_start") == 6);
    CHECK(count("all_reduce_wait") == 6);
    CHECK(program.find("all_reduce_start") < program.rfind("run_local"));
  } else {
    CHECK(count("all_reduce_start") == 0);
  }
}

TEST_CASE("all_reduce_start equals all_reduce for every tensor of a bucket", "[overlap]") {
  const Mesh mesh = test_mesh({{"x", 2}, {"y", 4}});
  for (MeshDimMask dims : {MeshDimMask{1}, MeshDimMask{2}, MeshDimMask{3}}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
      std::vector<std::vector<Tensor>> bucket;
      const Shape shapes[] = {{3, 5}, {7}, {2, 2, 2}};
      for (size_t t = 0; t < 3; ++t) {
        // Small integers: every order of summation gives the same bits (MPI's nonblocking
        // all-reduce may associate a sum over more than two processes differently).
        const DTensor value = cast(
            cast(random_uniform(shapes[t],
                                Layout::replicated(mesh, static_cast<int64_t>(shapes[t].size())),
                                static_cast<uint64_t>(t + 1), 0.0, 3.99),
                 DType::kI32),
            dtype);
        std::vector<Tensor> shards;
        // A distinct term per device: every shard a copy scaled by its device id.
        for (size_t i = 0; i < value.shards().size(); ++i) {
          const DTensor one = scale(value, static_cast<double>(mesh.local_device_ids()[i] + 1));
          shards.push_back(one.shards()[i]);
        }
        bucket.push_back(shards);
      }
      reset_collective_stats();
      PendingAllReduce pending = all_reduce_start(mesh, dims, bucket, ReduceOp::kSum);
      pending.test();
      const std::vector<std::vector<Tensor>> started = pending.wait();
      CHECK(collective_stats().count(CollectiveKind::kAllReduce) == 1);
      for (size_t t = 0; t < bucket.size(); ++t) {
        const std::vector<Tensor> want = all_reduce(mesh, dims, bucket[t], ReduceOp::kSum);
        REQUIRE(started[t].size() == want.size());
        for (size_t i = 0; i < want.size(); ++i) CHECK(same_bits(started[t][i], want[i]));
      }
    }
  }
}

TEST_CASE("gradient reduction options reject a bad bucket size", "[overlap][errors]") {
  CHECK_THROWS_MATCHES(set_gradient_reduction_options({true, 0.0}), InvalidArgumentError,
                       Message("[set_gradient_reduction_options] bucket_cap_mb must be a positive "
                               "number, got 0"));
  CHECK_THROWS_MATCHES(set_gradient_reduction_options({true, -2.5}), InvalidArgumentError,
                       Message("[set_gradient_reduction_options] bucket_cap_mb must be a positive "
                               "number, got -2.5"));
  CHECK(gradient_reduction_options().bucket_cap_mb == 25.0);
}
