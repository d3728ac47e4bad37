// The tf.distribute API over every strategy: the default strategy, scopes and contexts, run and
// its per-replica values, reduce with and without an axis, all_gather, merge_call, InputContext
// and distribute_datasets_from_function, each against tf.distribute's documented semantics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "dtensor/creation.h"
#include "ops/ops.h"
#include "train/keras/strategy.h"

using namespace dtensor;
using namespace dtensor::keras;
using Catch::Message;

namespace {

Tensor iota_f32(const Shape& shape, float start = 0) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

Tensor labels_of(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i);
  return t;
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

std::vector<float> global_values(const DTensor& t) { return values(to_global(t)); }

// A per-replica value as pending-sum terms: replica r holds `terms[r]` (what an op leaves partial
// over the replica dim, e.g. a sum over a batch-sharded dim, though an op may also put the whole
// sum on one replica and zeros elsewhere).
DTensor partial_terms(const Strategy& s, const std::vector<std::vector<float>>& terms) {
  std::vector<Tensor> shards;
  const int64_t width = static_cast<int64_t>(terms[0].size());
  for (const std::vector<float>& term : terms) {
    Tensor t = Tensor::empty({width}, DType::kF32);
    std::copy(term.begin(), term.end(), t.data<float>());
    shards.push_back(t);
  }
  return DTensor({width}, DType::kF32,
                 Layout({Layout::kUnsharded}, s.mesh(), {{s.replica_dim(), ReduceOp::kSum}}),
                 shards);
}

}  // namespace

TEST_CASE("the default strategy: one replica, values reduce to themselves") {
  const Strategy& d = get_strategy();
  CHECK(d.is_default());
  CHECK(d.name() == "DefaultStrategy");
  CHECK(d.num_replicas_in_sync() == 1);
  CHECK_FALSE(has_strategy());
  // Outside any scope the thread is in the default replica context.
  CHECK_FALSE(in_cross_replica_context());
  const ReplicaContext* ctx = get_replica_context();
  REQUIRE(ctx != nullptr);
  CHECK(&ctx->strategy() == &d);
  CHECK(ctx->num_replicas_in_sync() == 1);
  CHECK(to_global(ctx->replica_id_in_sync_group()).data<int32_t>()[0] == 0);

  // reduce and all_gather leave a value as it is, on any mesh; with an axis, reduce reduces it.
  MirroredStrategy four(4);
  DTensor x = distribute(iota_f32({4, 2}), four.batch_layout(2));
  CHECK(global_values(d.reduce(Reduction::kSum, x)) == global_values(x));
  CHECK(global_values(d.reduce(Reduction::kMean, x)) == global_values(x));
  CHECK(global_values(d.reduce(Reduction::kSum, x, 0)) == std::vector<float>{12, 16});
  CHECK(global_values(d.reduce(Reduction::kMean, x, -1)) ==
        std::vector<float>{0.5f, 2.5f, 4.5f, 6.5f});
  CHECK(global_values(ctx->all_gather(x, 0)) == global_values(x));
  CHECK(global_values(ctx->all_reduce(Reduction::kSum, x)) == global_values(x));

  // merge_call from the default replica context runs in cross-replica context, with the default
  // strategy.
  int calls = 0;
  const int got = ctx->merge_call([&](const Strategy& s) {
    ++calls;
    CHECK(s.is_default());
    CHECK(in_cross_replica_context());
    CHECK(get_replica_context() == nullptr);
    return 7;
  });
  CHECK(got == 7);
  CHECK(calls == 1);
  CHECK(get_replica_context() == ctx);

  // run on the default strategy: one replica.
  d.run([&](ReplicaContext& r) {
    CHECK(r.num_replicas_in_sync() == 1);
    CHECK(get_replica_context() == &r);
  });
}

TEST_CASE("scope, run and merge_call move between cross-replica and replica context") {
  MirroredStrategy s(4);
  {
    auto scope = s.scope();
    CHECK(&get_strategy() == &s);
    CHECK(has_strategy());
    CHECK(in_cross_replica_context());
    CHECK(get_replica_context() == nullptr);
    const ReplicaContext* seen = nullptr;
    s.run([&](ReplicaContext& ctx) {
      seen = &ctx;
      CHECK_FALSE(in_cross_replica_context());
      CHECK(get_replica_context() == &ctx);
      CHECK(&get_strategy() == &s);
      ctx.merge_call([&](const Strategy& merged) {
        CHECK(&merged == &s);
        CHECK(in_cross_replica_context());
        CHECK(get_replica_context() == nullptr);
        CHECK(&get_strategy() == &s);
        // run from cross-replica context inside merge_call is allowed, as in TF.
        s.run([&](ReplicaContext& inner) { CHECK(get_replica_context() == &inner); });
        CHECK(get_replica_context() == nullptr);
      });
      CHECK(get_replica_context() == &ctx);
    });
    CHECK(seen != nullptr);
    CHECK(in_cross_replica_context());
    CHECK(get_replica_context() == nullptr);
    // An exception from fn leaves the contexts as they were.
    CHECK_THROWS_AS(s.run([](ReplicaContext&) { throw std::runtime_error("boom"); }),
                    std::runtime_error);
    CHECK(in_cross_replica_context());
    CHECK(get_replica_context() == nullptr);
  }
  // run outside any scope: get_strategy() is run's strategy while it runs.
  s.run([&] {
    CHECK(&get_strategy() == &s);
    REQUIRE(get_replica_context() != nullptr);
    CHECK(get_replica_context()->num_replicas_in_sync() == 4);
  });
  CHECK(get_strategy().is_default());
  CHECK_FALSE(in_cross_replica_context());

  MirroredStrategy other(2);
  auto scope = s.scope();
  CHECK_THROWS_MATCHES(other.run([] {}), InvalidArgumentError,
                       Message("[MirroredStrategy::run] cannot run MirroredStrategy on mesh "
                               "replica=2 inside the scope of MirroredStrategy on mesh replica=4: "
                               "strategies do not mix"));
  CentralStorageStrategy central(4);
  CHECK_THROWS_MATCHES(central.scope(), InvalidArgumentError,
                       Message("[Strategy::scope] cannot enter the scope of CentralStorageStrategy "
                               "on mesh replica=4 inside the scope of MirroredStrategy on mesh "
                               "replica=4: strategies do not mix"));
}

TEST_CASE("merge_call runs once, in cross-replica context, and every replica gets its result") {
  MirroredStrategy s(4);
  int calls = 0;
  s.run([&](ReplicaContext& ctx) {
    DTensor ids = cast(ctx.replica_id_in_sync_group(), DType::kF32);
    DTensor total = ctx.merge_call(
        [&](const Strategy& strategy, const DTensor& per_replica) {
          ++calls;
          return strategy.reduce(Reduction::kSum, per_replica);
        },
        ids);
    CHECK(total.layout() == s.replicated_layout(1));
    for (const Tensor& shard : s.experimental_local_results(total)) {
      CHECK(values(shard) == std::vector<float>{6});
    }
    // merge_call inside merge_call: the thread is in cross-replica context there.
    ctx.merge_call([&](const Strategy&) {
      CHECK_THROWS_MATCHES(ctx.merge_call([](const Strategy&) {}), InvalidArgumentError,
                           Message("[ReplicaContext::merge_call] called in cross-replica context "
                                   "(MirroredStrategy on mesh replica=4); call it in the replica "
                                   "context of run"));
    });
  });
  CHECK(calls == 1);

  // A replica context kept past its run.
  const ReplicaContext* kept = nullptr;
  s.run([&](ReplicaContext& ctx) { kept = &ctx; });
  {
    auto scope = s.scope();
    CHECK_THROWS_MATCHES(kept->merge_call([](const Strategy&) {}), InvalidArgumentError,
                         Message("[ReplicaContext::merge_call] called in cross-replica context "
                                 "(MirroredStrategy on mesh replica=4); call it in the replica "
                                 "context of run"));
  }
  MirroredStrategy two(2);
  two.run([&] {
    // Inside another run: the current replica context is two's.
    CHECK_THROWS_MATCHES(kept->merge_call([](const Strategy&) {}), InvalidArgumentError,
                         Message("[ReplicaContext::merge_call] this replica context of "
                                 "MirroredStrategy on mesh replica=4 is not the current one; call "
                                 "merge_call on the context run gave"));
  });
}

TEST_CASE("run gives per-replica values; experimental_local_results lists them") {
  MirroredStrategy s(4);
  data::Dataset ds = s.experimental_distribute_dataset(iota_f32({8, 2}), labels_of(8));
  ds.batch(8);
  data::Batch batch = *ds.next();
  // Like tf's strategy.run(fn, args=(batch,)): each replica sees its slice of the global batch.
  auto step = [&](ReplicaContext& ctx, const data::Batch& b) {
    DTensor doubled_ids = scale(cast(ctx.replica_id_in_sync_group(), DType::kF32), 2.0);
    DTensor row_sums = reduce_sum(b.features, {1});                    // sharded: one per example
    DTensor replica_sums = partial_terms(s, {{6}, {22}, {38}, {54}});  // one term per replica
    DTensor everywhere = fill({1}, s.replicated_layout(1), 5.0);       // the same on every replica
    return std::vector<DTensor>{doubled_ids, row_sums, replica_sums, everywhere};
  };
  std::vector<DTensor> out = s.run(step, batch);
  std::vector<std::vector<float>> ids, rows, sums, same;
  for (const Tensor& t : s.experimental_local_results(out[0])) ids.push_back(values(t));
  for (const Tensor& t : s.experimental_local_results(out[1])) rows.push_back(values(t));
  for (const Tensor& t : s.experimental_local_results(out[2])) sums.push_back(values(t));
  for (const Tensor& t : s.experimental_local_results(out[3])) same.push_back(values(t));
  CHECK(ids == std::vector<std::vector<float>>{{0}, {2}, {4}, {6}});
  // Replica r holds rows 2r and 2r+1: [4r, 4r+1] and [4r+2, 4r+3].
  CHECK(rows == std::vector<std::vector<float>>{{1, 5}, {9, 13}, {17, 21}, {25, 29}});
  CHECK(sums == std::vector<std::vector<float>>{{6}, {22}, {38}, {54}});
  CHECK(same == std::vector<std::vector<float>>{{5}, {5}, {5}, {5}});

  // On a mesh with another dim, one result per replica (not per device).
  Mesh grid = Mesh::create({{"replica", 2}, {"copy", 2}}, DeviceType::kCPU);
  MirroredStrategy on_grid(grid, "replica");
  DTensor x = distribute(iota_f32({4}), Layout({"copy"}, grid));
  std::vector<Tensor> local = on_grid.experimental_local_results(x);
  REQUIRE(local.size() == 2);
  CHECK(values(local[1]) == std::vector<float>{0, 1, 2, 3});
}

TEST_CASE("reduce: SUM and MEAN over replicas, with and without an axis") {
  MirroredStrategy s(4);
  // Per-replica values [2, 3]: replica r holds rows 2r, 2r+1 of iota [8, 3].
  DTensor v = distribute(iota_f32({8, 3}), s.batch_layout(2));
  // axis=None: elementwise over replicas.
  CHECK(global_values(s.reduce(Reduction::kSum, v)) == std::vector<float>{36, 40, 44, 48, 52, 56});
  CHECK(global_values(s.reduce(Reduction::kMean, v)) == std::vector<float>{9, 10, 11, 12, 13, 14});
  // axis=0: over every replica's rows, i.e. over the global batch.
  CHECK(global_values(s.reduce(Reduction::kSum, v, 0)) == std::vector<float>{84, 92, 100});
  CHECK(global_values(s.reduce(Reduction::kMean, v, 0)) == std::vector<float>{10.5, 11.5, 12.5});
  // axis=1 (or -1): each replica sums its columns, then the replicas add up.
  DTensor by_columns = s.reduce(Reduction::kSum, v, -1);
  CHECK(by_columns.shape() == Shape{2});
  // Row i sums to 9i + 3: rows 0, 2, 4, 6 (each replica's first) and 1, 3, 5, 7.
  CHECK(global_values(by_columns) == std::vector<float>{120, 156});
  CHECK(global_values(s.reduce(Reduction::kMean, v, 1)) == std::vector<float>{10, 13});
  CHECK(s.reduce(Reduction::kMean, v, 0).layout().is_fully_replicated());

  // Uneven slices (10 rows: 3, 3, 3, 1): the mean over axis 0 is still the global batch's.
  DTensor uneven = distribute(iota_f32({10}), s.batch_layout(1));
  CHECK(global_values(s.reduce(Reduction::kSum, uneven, 0)) == std::vector<float>{45});
  CHECK(global_values(s.reduce(Reduction::kMean, uneven, 0)) == std::vector<float>{4.5});
  // A replicated value: every replica holds it.
  DTensor r = distribute(iota_f32({3}), s.replicated_layout(1));
  CHECK(global_values(s.reduce(Reduction::kSum, r, 0)) == std::vector<float>{12});
  CHECK(global_values(s.reduce(Reduction::kMean, r, 0)) == std::vector<float>{1});
  // A partial value: replica terms.
  DTensor terms = partial_terms(s, {{1, 2}, {3, 4}, {5, 6}, {7, 8}});
  CHECK(global_values(s.reduce(Reduction::kSum, terms)) == std::vector<float>{16, 20});
  CHECK(global_values(s.reduce(Reduction::kMean, terms, 0)) == std::vector<float>{4.5});
  CHECK(global_values(s.reduce(Reduction::kSum, reduce_sum(v, {0}))) ==
        std::vector<float>{84, 92, 100});

  CHECK_THROWS_MATCHES(s.reduce(Reduction::kSum, v, 2), InvalidArgumentError,
                       Message("[MirroredStrategy::reduce] axis 2 is out of range for f32[8,3] "
                               "[replica,unsharded] (rank 2)"));
  CHECK_THROWS_MATCHES(s.reduce(Reduction::kMean, cast(v, DType::kI32), 0), DTypeError,
                       Message("[MirroredStrategy::reduce] the mean of i32[8,3] "
                               "[replica,unsharded] over replicas needs a floating dtype"));
}

TEST_CASE("all_gather concatenates the replicas' values along an axis") {
  MirroredStrategy s(4);
  s.run([&](ReplicaContext& ctx) {
    DTensor ids = ctx.all_gather(cast(ctx.replica_id_in_sync_group(), DType::kF32), 0);
    CHECK(ids.layout() == s.replicated_layout(1));
    CHECK(global_values(ids) == std::vector<float>{0, 1, 2, 3});

    DTensor v = distribute(iota_f32({8, 2}), s.batch_layout(2));  // replica r: rows 2r, 2r+1
    CHECK(global_values(ctx.all_gather(v, 0)) == values(iota_f32({8, 2})));
    DTensor side_by_side = ctx.all_gather(v, 1);
    CHECK(side_by_side.shape() == Shape{2, 8});
    CHECK(global_values(side_by_side) ==
          std::vector<float>{0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15});
    // Replicated: N copies.
    DTensor r = distribute(iota_f32({2}), s.replicated_layout(1));
    CHECK(global_values(ctx.all_gather(r, 0)) == std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1});
    // Partial: each replica's term.
    CHECK(global_values(ctx.all_gather(partial_terms(s, {{2, 4}, {10, 12}, {18, 20}, {26, 28}}),
                                       0)) == std::vector<float>{2, 4, 10, 12, 18, 20, 26, 28});

    CHECK_THROWS_MATCHES(ctx.all_gather(distribute(iota_f32({6}), s.batch_layout(1)), 0),
                         InvalidArgumentError,
                         Message("[ReplicaContext::all_gather] value f32[6] [replica] is split "
                                 "unevenly over 4 replicas along dim 0; per-replica values must "
                                 "have one shape"));
    CHECK_THROWS_MATCHES(ctx.all_gather(v, -3), InvalidArgumentError,
                         Message("[ReplicaContext::all_gather] axis -3 is out of range for "
                                 "f32[8,2] [replica,unsharded] (rank 2)"));
  });
  Mesh grid = Mesh::create({{"replica", 2}, {"model", 2}}, DeviceType::kCPU);
  MirroredStrategy on_grid(grid, "replica");
  on_grid.run([&](ReplicaContext& ctx) {
    DTensor split = distribute(iota_f32({4}), Layout({"model"}, grid));
    CHECK_THROWS_MATCHES(ctx.all_gather(split, 0), LayoutError,
                         Message("[ReplicaContext::all_gather] value f32[4] [model]: dim 0 is "
                                 "split over mesh dim 'model', not only 'replica'"));
  });
}

TEST_CASE("InputContext: pipelines, replicas and the per-replica batch size") {
  InputContext single;
  CHECK(single.num_input_pipelines() == 1);
  CHECK(single.input_pipeline_id() == 0);
  CHECK(single.num_replicas_in_sync() == 1);
  CHECK(single.get_per_replica_batch_size(10) == 10);

  InputContext ctx(2, 1, 4);
  CHECK(ctx.num_input_pipelines() == 2);
  CHECK(ctx.input_pipeline_id() == 1);
  CHECK(ctx.num_replicas_in_sync() == 4);
  CHECK(ctx.get_per_replica_batch_size(64) == 16);
  CHECK_THROWS_MATCHES(ctx.get_per_replica_batch_size(10), InvalidArgumentError,
                       Message("[InputContext::get_per_replica_batch_size] the global batch size "
                               "10 is not divisible by num_replicas_in_sync 4"));
  CHECK_THROWS_MATCHES(InputContext(2, 2, 4), InvalidArgumentError,
                       Message("[InputContext] input pipeline 2 of 2: need 0 <= id < "
                               "num_input_pipelines"));
  CHECK_THROWS_MATCHES(InputContext(1, 0, 0), InvalidArgumentError,
                       Message("[InputContext] num_replicas_in_sync must be at least 1, got 0"));
}

TEST_CASE("distribute_datasets_from_function: each replica gets the pipeline's next batch") {
  MirroredStrategy s(4);
  int calls = 0;
  auto make = [&](int64_t rows) {
    return s.distribute_datasets_from_function([&, rows](const InputContext& ctx) {
      ++calls;
      CHECK(ctx.num_input_pipelines() == 1);
      CHECK(ctx.input_pipeline_id() == 0);
      CHECK(ctx.num_replicas_in_sync() == 4);
      data::Dataset ds(iota_f32({rows, 3}), labels_of(rows), InputContext::pipeline_mesh(),
                       "pipeline");
      ds.batch(ctx.get_per_replica_batch_size(8));
      return ds;
    });
  };
  DistributedDataset dist = make(24);
  CHECK(calls == 1);
  // The same global batches as experimental_distribute_dataset with batch(8).
  data::Dataset reference = s.experimental_distribute_dataset(iota_f32({24, 3}), labels_of(24));
  reference.batch(8);
  for (int step = 0; step < 3; ++step) {
    std::optional<data::Batch> b = dist.next();
    std::optional<data::Batch> want = reference.next();
    REQUIRE(b);
    CHECK(b->size == 8);
    CHECK(b->index == step);
    CHECK(b->features.layout() == s.batch_layout(2));
    CHECK(b->labels.layout() == s.batch_layout(1));
    CHECK(global_values(b->features) == global_values(want->features));
    CHECK(bitwise_equal(to_global(b->labels), to_global(want->labels)));
  }
  CHECK_FALSE(dist.next());

  // 22 rows: the last step would leave replica 3 without a batch; it is not taken.
  DistributedDataset short_one = make(22);
  for (int step = 0; step < 2; ++step) CHECK(short_one.next());
  CHECK_FALSE(short_one.next());
  // 23 rows: replica 3's last batch is shorter than the others'.
  DistributedDataset ragged = make(23);
  ragged.next();
  ragged.next();
  CHECK_THROWS_MATCHES(ragged.next(), InvalidArgumentError,
                       Message("[DistributedDataset::next] replica 0 got a batch of 2 examples, "
                               "replica 3 one of 1; per-replica batches of one step must have one "
                               "size (batch the pipeline with drop_remainder)"));
}

TEST_CASE("the strategies behind one interface") {
  OneDeviceStrategy one;
  CHECK(one.name() == "OneDeviceStrategy");
  CHECK(one.num_replicas_in_sync() == 1);
  CHECK(one.mesh().num_devices() == 1);

  CentralStorageStrategy central(4);
  CHECK(central.name() == "CentralStorageStrategy");
  CHECK(central.num_replicas_in_sync() == 4);
  CHECK(central.mesh().num_local_devices() == 4);
  CHECK(central.variable_device() == 0);

  MultiWorkerMirroredStrategy workers(3);  // one process: a one-worker job
  CHECK(workers.name() == "MultiWorkerMirroredStrategy");
  CHECK(workers.num_replicas_in_sync() == 3);
  CHECK(workers.num_workers() == 1);
  CHECK(workers.worker_index() == 0);
  CHECK(workers.is_chief());

  // One interface: the same calls on every strategy.
  std::vector<const Strategy*> all{&one, &central, &workers};
  for (const Strategy* s : all) {
    INFO(s->name());
    DTensor ids = s->run([](ReplicaContext& ctx) { return ctx.replica_id_in_sync_group(); });
    const int64_t n = s->num_replicas_in_sync();
    CHECK(to_global(s->reduce(Reduction::kSum, ids)).data<int32_t>()[0] == n * (n - 1) / 2);
    auto scope = s->scope();
    CHECK(get_strategy().same_as(*s));
  }

  CHECK_THROWS_MATCHES(CentralStorageStrategy(0), InvalidArgumentError,
                       Message("[CentralStorageStrategy] need at least 1 replica, got 0"));
  CHECK_THROWS_MATCHES(MultiWorkerMirroredStrategy(0), InvalidArgumentError,
                       Message("[MultiWorkerMirroredStrategy] need at least 1 replica, got 0"));
}
