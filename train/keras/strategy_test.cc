// MirroredStrategy: replica counts, scopes, replicated variables, distributed datasets, replica
// contexts and all-reduce, the gradient all-reduce count, and training on 1, 4 and 8 replicas.
#include "train/keras/strategy.h"

#include <catch2/catch.hpp>

#include <cmath>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/virtual_devices.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/data/idx.h"
#include "train/keras/layers.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using namespace dtensor::keras;
using Catch::Message;

namespace {

Tensor iota_f32(const Shape& shape, float start = 0) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

Tensor labels_of(int64_t n, int32_t classes = 10) {
  Tensor t = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(i % classes);
  return t;
}

// Every local shard of `x` holds the same bytes.
bool identical_replicas(const DTensor& x) {
  for (const Tensor& s : x.shards()) {
    if (!bitwise_equal(s, x.shard(0))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("num_replicas_in_sync and the replica mesh") {
  configure_virtual_cpus(8);
  MirroredStrategy all;
  CHECK(all.num_replicas_in_sync() == 8);
  CHECK(all.mesh().dims_string() == "replica=8");
  CHECK(all.replica_dim() == "replica");
  configure_virtual_cpus(1);

  MirroredStrategy four(4);
  CHECK(four.num_replicas_in_sync() == 4);
  CHECK(four.mesh().num_local_devices() == 4);

  Mesh grid = Mesh::create({{"data", 2}, {"copy", 2}}, DeviceType::kCPU);
  MirroredStrategy on_grid(grid, "data");
  CHECK(on_grid.num_replicas_in_sync() == 2);
  CHECK(on_grid.batch_layout(2) == Layout::batch_sharded(grid, "data", 2));

  CHECK_THROWS_MATCHES(MirroredStrategy(0), InvalidArgumentError,
                       Message("[MirroredStrategy] need at least 1 replica, got 0"));
  CHECK_THROWS_MATCHES(MirroredStrategy(grid, "replica"), InvalidArgumentError,
                       Message("[MirroredStrategy] mesh data=2,copy=2 has no dim 'replica'"));
}

TEST_CASE("scopes make a strategy current on this thread") {
  CHECK(current_strategy().num_replicas_in_sync() == 1);
  MirroredStrategy a(4), b(2);
  {
    auto outer = a.scope();
    CHECK(&current_strategy() == &a);
    {
      // The same strategy (or a copy) nests; layers built here get its replicated layout.
      MirroredStrategy copy = a;
      auto inner = copy.scope();
      CHECK(&current_strategy() == &copy);
      Dense d(3, {}, "d");
      d.build(5, 1);
      CHECK(d.variables()[0].layout() == a.replicated_layout(2));
    }
    CHECK(&current_strategy() == &a);
    // Another strategy's scope does not: tf.distribute refuses to mix strategies.
    CHECK_THROWS_MATCHES(b.scope(), InvalidArgumentError,
                         Message("[Strategy::scope] cannot enter the scope of MirroredStrategy on "
                                 "mesh replica=2 inside the scope of MirroredStrategy on mesh "
                                 "replica=4: strategies do not mix"));
    CHECK(&current_strategy() == &a);
  }
  CHECK(current_strategy().num_replicas_in_sync() == 1);
}

TEST_CASE("variables created by the strategy are replicated") {
  MirroredStrategy s(4);
  DVariable v = s.create_variable(iota_f32({3, 2}), "v");
  CHECK(v.layout() == s.replicated_layout(2));
  CHECK(identical_replicas(v.value()));
  CHECK(bitwise_equal(to_global(v.value()), iota_f32({3, 2})));

  // From a sharded DTensor on the same mesh: gathered to replicated.
  DTensor sharded = distribute(iota_f32({8}), s.batch_layout(1));
  DVariable w = s.create_variable(sharded, "w");
  CHECK(w.layout() == s.replicated_layout(1));
  CHECK(bitwise_equal(to_global(w.value()), iota_f32({8})));

  MirroredStrategy other(2);
  CHECK_THROWS_MATCHES(
      s.create_variable(distribute(iota_f32({2}), other.replicated_layout(1)), "u"), LayoutError,
      Message("[MirroredStrategy::create_variable] initial value of 'u' f32[2] [unsharded] lives "
              "on mesh replica=2, the strategy on replica=4"));
  // A mesh whose dims look the same is named with what tells it apart.
  const Mesh named = Mesh::create({{"replica", 4}}, DeviceType::kCPU, 0, 1, "m");
  CHECK_THROWS_MATCHES(
      s.create_variable(distribute(iota_f32({2}), Layout::replicated(named, 1)), "u"), LayoutError,
      Message("[MirroredStrategy::create_variable] initial value of 'u' f32[2] [unsharded] lives "
              "on mesh 'm' replica=4 (CPU, process-local, ids 0-3), the strategy on replica=4 "
              "(CPU, process-local, ids 0-3)"));
}

TEST_CASE("a distributed dataset gives each replica its slice of the global batch") {
  MirroredStrategy s(4);
  const int64_t n = 22, width = 3;
  data::Dataset ds = s.distribute_dataset(iota_f32({n, width}), labels_of(n));
  ds.batch(10);  // global batch: 3 rows per replica, the last replica 1
  std::optional<data::Batch> batch = ds.next();
  REQUIRE(batch);
  CHECK(batch->features.layout() == s.batch_layout(2));
  CHECK(batch->labels.layout() == s.batch_layout(1));
  const std::vector<int64_t> rows{3, 3, 3, 1};
  int64_t first = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const Tensor& shard = batch->features.shard(r);
    REQUIRE(shard.shape() == Shape{rows[r], width});
    CHECK(shard.data<float>()[0] == static_cast<float>(first * width));
    first += rows[r];
  }
  CHECK(ds.batches_per_epoch() == 3);
  // Over an example source: the same batches.
  data::Dataset from_source =
      s.distribute_dataset(data::tensor_examples(iota_f32({n, width}), labels_of(n)));
  from_source.batch(10);
  std::optional<data::Batch> same = from_source.next();
  REQUIRE(same);
  for (int64_t r = 0; r < 4; ++r) {
    CHECK(bitwise_equal(same->features.shard(r), batch->features.shard(r)));
    CHECK(bitwise_equal(same->labels.shard(r), batch->labels.shard(r)));
  }
}

TEST_CASE("replica context: replica ids and all_reduce") {
  for (int64_t n : {1, 3, 4}) {
    INFO(n << " replicas");
    MirroredStrategy s(n);
    s.run([&](ReplicaContext& ctx) {
      CHECK(ctx.num_replicas_in_sync() == n);
      CHECK(&ctx.strategy() == &s);
      DTensor id = ctx.replica_id();
      CHECK(id.shape() == Shape{n});
      CHECK(id.layout() == s.batch_layout(1));
      for (int64_t r = 0; r < n; ++r) CHECK(id.shard(r).data<int32_t>()[0] == r);

      // Sharded per-replica values: each replica holds its shard.
      DTensor sum_ids = ctx.all_reduce(Reduction::kSum, id);
      CHECK(sum_ids.layout().is_fully_replicated());
      CHECK(sum_ids.shape() == Shape{1});
      CHECK(to_global(sum_ids).data<int32_t>()[0] == n * (n - 1) / 2);
      DTensor mean_ids = ctx.all_reduce(Reduction::kMean, cast(id, DType::kF32));
      CHECK(to_global(mean_ids).data<float>()[0] == Approx((n - 1) / 2.0));

      // Replicated: every replica holds the value.
      DTensor one = fill({2}, s.replicated_layout(1), 1.5);
      CHECK(to_global(ctx.all_reduce(Reduction::kSum, one)).data<float>()[1] == 1.5f * n);
      CHECK(to_global(ctx.all_reduce(Reduction::kMean, one)).data<float>()[0] == 1.5f);

      // Partial: a reduction over a batch-sharded dim; replica r's term is its rows' sum.
      DTensor x = distribute(iota_f32({4 * n, 2}), s.batch_layout(2));
      DTensor partial = reduce_sum(x, {0});
      if (n > 1) CHECK(partial.layout().is_partial());
      const float total = static_cast<float>(8 * n * (8 * n - 1) / 2);  // 0 + 1 + ... + 8n-1
      Tensor summed = to_global(ctx.all_reduce(Reduction::kSum, partial));
      CHECK(summed.data<float>()[0] + summed.data<float>()[1] == total);
      Tensor mean = to_global(ctx.all_reduce(Reduction::kMean, partial));
      CHECK(mean.data<float>()[0] == Approx(summed.data<float>()[0] / n));
      // strategy.reduce is the same combination, outside run too.
      CHECK(bitwise_equal(to_global(s.reduce(Reduction::kSum, partial)), summed));
    });
  }
}

TEST_CASE("all_reduce errors") {
  MirroredStrategy s(4);
  ReplicaContext* seen = nullptr;
  s.run([&](ReplicaContext& ctx) {
    seen = &ctx;
    DTensor ids = ctx.replica_id();
    CHECK_THROWS_MATCHES(ctx.all_reduce(Reduction::kMean, ids), DTypeError,
                         Message("[MirroredStrategy::reduce] the mean of i32[4] [replica] over "
                                 "replicas needs a floating dtype"));
    DTensor uneven = distribute(iota_f32({6}), s.batch_layout(1));
    CHECK_THROWS_MATCHES(ctx.all_reduce(Reduction::kSum, uneven), InvalidArgumentError,
                         Message("[MirroredStrategy::reduce] value f32[6] [replica] is split "
                                 "unevenly over 4 replicas along dim 0; per-replica values must "
                                 "have one shape"));
    DTensor pending_max = reduce_max(distribute(iota_f32({8}), s.batch_layout(1)));
    CHECK_THROWS_MATCHES(ctx.all_reduce(Reduction::kSum, pending_max), InvalidArgumentError,
                         Message("[MirroredStrategy::reduce] value f32[] [] partial:max(replica) "
                                 "is a pending max over 'replica'; only partial sums combine by "
                                 "sum or mean"));
    MirroredStrategy other(2);
    CHECK_THROWS_MATCHES(
        ctx.all_reduce(Reduction::kSum, fill({}, other.replicated_layout(0), 1.0)), MeshError,
        Message("[MirroredStrategy::reduce] value f32[] [] lives on mesh replica=2, the "
                "strategy on replica=4"));
  });
  CHECK(seen != nullptr);
}

TEST_CASE("compute_average_loss divides by the global batch size") {
  MirroredStrategy s(4);
  DTensor losses = distribute(iota_f32({8}), s.batch_layout(1));
  CHECK(to_global(compute_average_loss(losses)).data<float>()[0] == Approx(3.5));
  CHECK(to_global(compute_average_loss(losses, 16)).data<float>()[0] == Approx(1.75));
  CHECK_THROWS_MATCHES(compute_average_loss(losses, 0), InvalidArgumentError,
                       Message("[compute_average_loss] global batch size must be at least 1, "
                               "got 0"));
}

TEST_CASE("each replicated variable's gradient is all-reduced once") {
  MirroredStrategy s(4);
  auto scope = s.scope();
  Sequential model(6, {Dense(5, relu), Dense(3)}, 3);
  data::Dataset ds = s.distribute_dataset(iota_f32({16, 6}, -40.0f), labels_of(16, 3));
  ds.batch(16);
  data::Batch batch = *ds.next();
  const std::vector<DVariable> vars = model.variables();
  REQUIRE(vars.size() == 4);
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  DTensor loss = compute_average_loss(
      sparse_softmax_cross_entropy(model.call(batch.features, true), batch.labels));
  reset_collective_stats();
  std::vector<DTensor> grads = tape.gradient(loss, vars);
  CollectiveStats stats = collective_stats();
  INFO(stats.to_string());
  CHECK(stats.count(CollectiveKind::kAllReduce) == 4);
  CHECK(stats.total() == 4);
  for (size_t i = 0; i < vars.size(); ++i) {
    CHECK(grads[i].layout() == vars[i].layout());
    CHECK(identical_replicas(grads[i]));
  }
}

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<Tensor> weights;
};

// A custom training loop in the tf.distribute style: strategy.run(step) per global batch.
Run train_on(int64_t replicas, int64_t global_batch, int64_t steps) {
  MirroredStrategy strategy(replicas);
  auto scope = strategy.scope();
  Sequential model(784, {Dense(32, relu), Dense(10)}, 11);
  Adam optimizer(0.01);
  data::MnistSplit digits = data::synthetic_digits(global_batch * steps, 5);
  data::Dataset ds = strategy.distribute_dataset(digits.images, digits.labels);
  ds.shuffle(9).batch(global_batch).repeat();
  const std::vector<DVariable> vars = model.variables();
  auto step = [&](ReplicaContext& ctx, const data::Batch& batch) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor per_example =
        sparse_softmax_cross_entropy(model.call(batch.features, true), batch.labels);
    DTensor loss = compute_average_loss(per_example, global_batch);
    optimizer.apply(vars, tape.gradient(loss, vars));
    return ctx.all_reduce(Reduction::kSum, loss);
  };
  Run run;
  for (int64_t i = 0; i < steps; ++i) {
    DTensor loss = strategy.run(step, *ds.next());
    run.losses.push_back(to_global(loss).data<float>()[0]);
  }
  for (const DVariable& v : vars) {
    CHECK(v.layout() == strategy.replicated_layout(v.shape().size()));
    CHECK(identical_replicas(v.value()));
    run.weights.push_back(to_global(v.value()));
  }
  return run;
}

}  // namespace

TEST_CASE("training on 1, 4 and 8 replicas gives the same losses") {
  for (int64_t global_batch : {32, 30}) {  // 30: replicas of 4 and 8 get uneven slices
    INFO("global batch " << global_batch);
    Run one = train_on(1, global_batch, 6);
    for (int64_t replicas : {4, 8}) {
      INFO(replicas << " replicas");
      Run many = train_on(replicas, global_batch, 6);
      REQUIRE(many.losses.size() == one.losses.size());
      for (size_t i = 0; i < one.losses.size(); ++i) {
        CHECK(many.losses[i] == Approx(one.losses[i]).epsilon(1e-5));
      }
      for (size_t v = 0; v < one.weights.size(); ++v) {
        const Tensor& a = one.weights[v];
        const Tensor& b = many.weights[v];
        REQUIRE(a.shape() == b.shape());
        double max_diff = 0;
        for (int64_t i = 0; i < a.num_elements(); ++i) {
          max_diff = std::max<double>(max_diff, std::abs(b.data<float>()[i] - a.data<float>()[i]));
        }
        CHECK(max_diff < 1e-4);
      }
    }
    // Training moved: the loss went down.
    CHECK(one.losses.back() < one.losses.front());
  }
}
