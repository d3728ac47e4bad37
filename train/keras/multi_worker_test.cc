// MultiWorkerMirroredStrategy across the processes of mpirun (and in one process, a one-worker
// job): the workers' replicas form one mesh, collectives span the workers, each worker feeds its
// own replicas, and fit trains to what one process with as many replicas gets, to 1e-6.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "runtime/process.h"
#include "train/keras/strategy.h"
#include "train/keras/test_problem.h"

using namespace dtensor;
using namespace dtensor::keras;
using namespace dtensor::keras::testing;

namespace {

constexpr int64_t kPerWorker = 2;

Tensor iota_f32(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

Tensor labels_of(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i);
  return t;
}

}  // namespace

TEST_CASE("MultiWorkerMirroredStrategy: workers, replicas and cross-worker collectives") {
  const ProcessInfo process = this_process();
  MultiWorkerMirroredStrategy s(kPerWorker);
  const int64_t n = kPerWorker * process.count;
  CHECK(s.num_workers() == process.count);
  CHECK(s.worker_index() == process.index);
  CHECK(s.is_chief() == (process.index == 0));
  CHECK(s.num_replicas_in_sync() == n);
  CHECK(s.mesh().num_local_devices() == kPerWorker);

  s.run([&](ReplicaContext& ctx) {
    DTensor ids = cast(ctx.replica_id_in_sync_group(), DType::kF32);
    // This worker's replicas are [k*L, (k+1)*L).
    std::vector<Tensor> local = s.experimental_local_results(ids);
    REQUIRE(local.size() == static_cast<size_t>(kPerWorker));
    for (int64_t i = 0; i < kPerWorker; ++i) {
      CHECK(local[i].data<float>()[0] == static_cast<float>(process.index * kPerWorker + i));
    }
    CHECK(to_global(ctx.all_reduce(Reduction::kSum, ids)).data<float>()[0] ==
          static_cast<float>(n * (n - 1) / 2));
    Tensor gathered = to_global(ctx.all_gather(ids, 0));
    for (int64_t r = 0; r < n; ++r) CHECK(gathered.data<float>()[r] == static_cast<float>(r));
    int calls = 0;
    DTensor mean = ctx.merge_call([&](const Strategy& strategy) {
      ++calls;
      return strategy.reduce(Reduction::kMean, ids, 0);
    });
    CHECK(calls == 1);
    CHECK(to_global(mean).data<float>()[0] == Approx((n - 1) / 2.0));
  });
}

TEST_CASE("MultiWorkerMirroredStrategy: one input pipeline per worker") {
  const ProcessInfo process = this_process();
  MultiWorkerMirroredStrategy s(kPerWorker);
  const int64_t n = s.num_replicas_in_sync();
  const int64_t rows_per_pipeline = 4 * kPerWorker;
  DistributedDataset dist = s.distribute_datasets_from_function([&](const InputContext& ctx) {
    CHECK(ctx.num_input_pipelines() == process.count);
    CHECK(ctx.input_pipeline_id() == process.index);
    CHECK(ctx.num_replicas_in_sync() == n);
    // This pipeline's shard of the examples: rows [id*R, (id+1)*R) of a global iota.
    Tensor mine = iota_f32({rows_per_pipeline, 1});
    for (int64_t i = 0; i < rows_per_pipeline; ++i) {
      mine.data<float>()[i] += static_cast<float>(ctx.input_pipeline_id() * rows_per_pipeline);
    }
    data::Dataset ds(mine, labels_of(rows_per_pipeline), InputContext::pipeline_mesh(), "pipeline");
    ds.batch(ctx.get_per_replica_batch_size(2 * n));
    return ds;
  });
  std::optional<data::Batch> b = dist.next();
  REQUIRE(b);
  CHECK(b->size == 2 * n);
  // Replica r (worker r / L, its (r % L)-th local replica) holds that worker's (r % L)-th batch.
  Tensor global = to_global(b->features);
  for (int64_t r = 0; r < n; ++r) {
    const float first =
        static_cast<float>((r / kPerWorker) * rows_per_pipeline + 2 * (r % kPerWorker));
    CHECK(global.data<float>()[2 * r] == first);
    CHECK(global.data<float>()[2 * r + 1] == first + 1);
  }
}

// One process adds the terms of a gradient over its replicas in f64 and rounds once (batch-
// invariant sums, ops/expand.h); across processes each process rounds its term to f32 before the
// cross-process sum. So the first step's gradient may differ in the last bit, and Adam carries
// that on: after one epoch (6 steps) the weights differ by 8.3e-7 at most, after 12 by 1.3e-6
// (deterministic figures: the same bits every run).
TEST_CASE("MultiWorkerMirroredStrategy trains as one process does, to 1e-6") {
  for (const int64_t per_worker : {int64_t{1}, kPerWorker}) {
    const double tolerance = 1e-6;
    INFO(per_worker << " replicas per worker");
    const int64_t n = per_worker * this_process().count;
    Problem workers(std::make_shared<MultiWorkerMirroredStrategy>(per_worker));
    // The reference: as many replicas, all in this process, on a mesh with the workers' dims and
    // ids (the runtime's caches tell a process-local mesh from a spanning one).
    Problem one_process(std::make_shared<MirroredStrategy>(
        Mesh::create({{"replica", n}}, DeviceType::kCPU), "replica"));
    REQUIRE(one_process.strategy.mesh().num_local_devices() == n);
    const std::vector<Tensor> initial = one_process.weights();
    FitOptions options = quiet(1);
    History got = workers.trainer.fit(workers.train, options);
    History want = one_process.trainer.fit(one_process.train, options);
    const std::vector<Tensor> a = workers.weights(), b = one_process.weights();
    REQUIRE(a.size() == b.size());
    double diff = 0;
    for (size_t v = 0; v < a.size(); ++v) {
      for (int64_t i = 0; i < a[v].num_elements(); ++i) {
        diff = std::max<double>(diff, std::abs(a[v].data<float>()[i] - b[v].data<float>()[i]));
      }
    }
    CHECK(diff < tolerance);
    for (const auto& [name, values] : want.history) {
      for (size_t e = 0; e < values.size(); ++e) {
        CHECK(std::abs(got.history.at(name)[e] - values[e]) < tolerance);
      }
    }
    // Training moved the weights.
    double moved = 0;
    for (size_t v = 0; v < b.size(); ++v) {
      for (int64_t i = 0; i < b[v].num_elements(); ++i) {
        moved =
            std::max<double>(moved, std::abs(b[v].data<float>()[i] - initial[v].data<float>()[i]));
      }
    }
    CHECK(moved > 1e-3);
  }
}
