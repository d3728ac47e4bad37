// ClusterCoordinator semantics (schedule, join, done, RemoteValue, per-worker datasets), the
// servers' asynchronous updates, and losing workers and servers, on a cluster of real gRPC
// servers inside this process (train/ps/local_cluster.h).
#include "train/ps/coordinator.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "runtime/error.h"
#include "train/ps/parameter_server.h"
#include "train/ps/local_cluster.h"

using namespace dtensor;
using namespace dtensor::ps;
using Catch::Matchers::Contains;
using Catch::Matchers::Message;
using Catch::Matchers::StartsWith;
using testing::LocalCluster;

namespace {

FunctionRegistry make_registry() {
  FunctionRegistry r;
  r.add_function("echo", [](WorkerContext& c, const std::string& args) {
    return args + "@" + std::to_string(c.worker_index());
  });
  r.add_function("sleep", [](WorkerContext& c, const std::string& args) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(args)));
    return std::to_string(c.worker_index());
  });
  r.add_function("fail", [](WorkerContext&, const std::string&) -> std::string {
    throw_error<InvalidArgumentError>("fail", "boom");
  });
  // Pulls, pushes a gradient of ones for every variable, returns the first element pulled.
  r.add_function("ones_step", [](WorkerContext& c, const std::string&) {
    std::map<std::string, Tensor> values = c.pull();
    std::map<std::string, Tensor> grads;
    for (const auto& [name, v] : values) {
      Tensor g = Tensor::empty(v.shape(), DType::kF32);
      std::fill(g.data<float>(), g.data<float>() + g.num_elements(), 1.0f);
      grads.emplace(name, g);
    }
    c.push(grads);
    return std::to_string(values.begin()->second.data<float>()[0]);
  });
  // A ones_step on worker 0 after 200 ms; on worker 1 a ones_step, then 2 s of waiting before
  // the reply (in which the test stops worker 1: lost between its push and its reply).
  r.add_function("push_then_wait",
                 [ones = r.function("ones_step")](WorkerContext& c, const std::string& args) {
                   if (c.worker_index() == 0)
                     std::this_thread::sleep_for(std::chrono::milliseconds(200));
                   const std::string result = (*ones)(c, args);
                   if (c.worker_index() == 1)
                     std::this_thread::sleep_for(std::chrono::milliseconds(2000));
                   return result;
                 });
  r.add_dataset("numbers", [](const keras::InputContext& ctx) {
    const int64_t n = 10 + ctx.input_pipeline_id();
    Tensor x = Tensor::zeros({n, 2}, DType::kF32), y = Tensor::zeros({n}, DType::kI32);
    data::Dataset d(x, y, keras::InputContext::pipeline_mesh(), "pipeline");
    d.batch(2);
    return d;
  });
  r.add_function("dataset_size", [](WorkerContext& c, const std::string&) {
    return std::to_string(c.dataset("numbers").num_examples());
  });
  return r;
}

StrategyOptions fast_options() {
  StrategyOptions o;
  o.optimizer = "sgd";
  o.learning_rate = 0.5;
  o.rpc_timeout_s = 5;
  o.watchdog.interval = std::chrono::milliseconds(100);
  o.watchdog.lost_after = std::chrono::milliseconds(1000);
  return o;
}

Tensor arange(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

}  // namespace

TEST_CASE("schedule returns RemoteValues that join and done settle") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator coordinator(strategy);
  std::vector<RemoteValue> values;
  for (int i = 0; i < 12; ++i) values.push_back(coordinator.schedule("echo", std::to_string(i)));
  coordinator.join();
  CHECK(coordinator.done());
  std::set<int64_t> workers;
  for (int i = 0; i < 12; ++i) {
    REQUIRE(values[i].is_ready());
    const int64_t w = values[i].worker();
    workers.insert(w);
    CHECK(values[i].fetch() == std::to_string(i) + "@" + std::to_string(w));
  }
  CHECK(workers.size() >= 1);
  CHECK(coordinator.stats().functions_done == 12);
  // done() is false while a function runs, and fetch() waits for it.
  RemoteValue slow = coordinator.schedule("sleep", "300");
  CHECK_FALSE(coordinator.done());
  CHECK_FALSE(slow.is_ready());
  CHECK(slow.fetch().size() == 1);
  coordinator.join();
  CHECK(coordinator.done());
  CHECK(strategy.name() == "ParameterServerStrategy");
  CHECK(strategy.num_replicas_in_sync() == 1);
}

TEST_CASE("a function's error reaches fetch, join and done; unknown functions too") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(1, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator coordinator(strategy);
  RemoteValue bad = coordinator.schedule("fail");
  CHECK_THROWS_MATCHES(bad.fetch(), InvalidArgumentError,
                       Message("[RemoteValue::fetch] function 'fail' failed on worker:0: [fail] "
                               "boom"));
  CHECK_THROWS_MATCHES(coordinator.join(), InvalidArgumentError,
                       Message("[ClusterCoordinator::join] function 'fail' failed on worker:0: "
                               "[fail] boom"));
  CHECK_THROWS_AS(coordinator.done(), InvalidArgumentError);

  ClusterCoordinator other(strategy);
  CHECK_THROWS_MATCHES(other.schedule("nope").fetch(), InvalidArgumentError,
                       Message("[RemoteValue::fetch] function 'nope' failed on worker:0: "
                               "[Worker::Run] no function 'nope' registered"));
}

TEST_CASE("fetch is bounded") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(1, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator coordinator(strategy);
  RemoteValue slow = coordinator.schedule("sleep", "1500");
  CHECK_THROWS_MATCHES(slow.fetch(std::chrono::milliseconds(100)), CommunicationError,
                       Message("[RemoteValue::fetch] no result after 100 ms"));
  coordinator.join();
}

TEST_CASE("servers apply pushed gradients to partitioned variables on arrival") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(2, 2, registry);
  StrategyOptions options = fast_options();
  options.partitioner = fixed_shards_partitioner(3);
  ParameterServerStrategy strategy(cluster.spec(), options);
  const ShardedVariable kernel = strategy.create_sharded_variable(arange({7, 3}), "kernel");
  const ShardedVariable bias = strategy.create_sharded_variable(arange({2}), "bias");
  REQUIRE(kernel.shards.size() == 3);
  CHECK((kernel.shards[0].rows() == 3 && kernel.shards[1].rows() == 2));
  CHECK(kernel.shards[0].ps() == 0);
  CHECK(kernel.shards[1].ps() == 1);
  CHECK(kernel.shards[2].ps() == 0);
  CHECK(bias.shards.size() == 2);
  CHECK(bias.shards[0].ps() == 1);

  ClusterCoordinator coordinator(strategy);
  for (int i = 0; i < 4; ++i) coordinator.schedule("ones_step");
  coordinator.join();
  const std::map<std::string, Tensor> values = strategy.read_variables();
  const std::vector<int64_t> staleness = strategy.staleness();
  REQUIRE(staleness.size() == 8);  // 4 pushes to each of 2 servers, server 0's first
  // Two workers race, so a push may be 2 or 3 steps stale on a loaded host; such a push moves
  // its server's variables by lr / staleness (staleness_lr_scale), not lr.
  double moved[2] = {0, 0};
  for (int64_t k = 0; k < 8; ++k) {
    CHECK((staleness[k] >= 0 && staleness[k] <= 3));
    moved[k / 4] += 0.5 * staleness_lr_scale(staleness[k]);
  }
  // Kernel rows 0-2 and 5-6 live on server 0, rows 3-4 and the bias on server 1.
  for (int64_t i = 0; i < 21; ++i) {
    const int64_t row = i / 3;
    const double expected = static_cast<double>(i) - moved[row == 3 || row == 4 ? 1 : 0];
    CHECK(values.at("kernel").data<float>()[i] == Approx(expected).margin(1e-5));
  }
  CHECK(values.at("bias").data<float>()[1] == Approx(1.0 - moved[1]).margin(1e-5));
}

TEST_CASE("per-worker datasets are built on each worker with its InputContext") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator coordinator(strategy);
  const PerWorkerDataset d = coordinator.create_per_worker_dataset("numbers");
  CHECK(d.name == "numbers");
  std::vector<RemoteValue> sizes;
  for (int i = 0; i < 6; ++i) sizes.push_back(coordinator.schedule("dataset_size"));
  coordinator.join();
  for (RemoteValue& v : sizes) CHECK(v.fetch() == std::to_string(10 + v.worker()));
}

TEST_CASE("a lost worker's functions run on the others, and a restarted worker rejoins") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator::Options options;
  options.log = false;
  ClusterCoordinator coordinator(strategy, options);
  // Worker 1 is stopped mid-function: its server cancels the call after a second's grace, before
  // the function ends, so the coordinator gives the function to worker 0.
  std::vector<RemoteValue> values;
  for (int i = 0; i < 3; ++i) values.push_back(coordinator.schedule("sleep", "1500"));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  cluster.stop_worker(1);
  coordinator.join();
  for (RemoteValue& v : values) CHECK(v.fetch() == "0");
  CoordinatorStats stats = coordinator.stats();
  CHECK(stats.reruns == 1);
  CHECK(stats.functions_done == 3);
  CHECK(stats.workers_lost == 1);
  CHECK(coordinator.live_workers() == 1);

  cluster.start_worker(1);
  for (int i = 0; i < 50 && coordinator.live_workers() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(coordinator.live_workers() == 2);
  std::set<int64_t> workers;
  std::vector<RemoteValue> after;
  for (int i = 0; i < 6; ++i) after.push_back(coordinator.schedule("sleep", "100"));
  coordinator.join();
  for (RemoteValue& v : after) workers.insert(v.worker());
  CHECK(workers == std::set<int64_t>{0, 1});
  CHECK(coordinator.stats().workers_joined == 3);
}

TEST_CASE("a step re-run after its worker was lost between push and reply is applied once") {
  const FunctionRegistry registry = make_registry();
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  strategy.create_sharded_variable(arange({4}), "w");
  ClusterCoordinator::Options options;
  options.log = false;
  ClusterCoordinator coordinator(strategy, options);
  for (int i = 0; i < 50 && coordinator.live_workers() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(coordinator.live_workers() == 2);
  // Worker 1 takes one step (worker 0 is busy 200 ms with the other), pushes, and waits.
  std::vector<RemoteValue> values;
  for (int i = 0; i < 2; ++i) values.push_back(coordinator.schedule("push_then_wait"));
  for (int i = 0; i < 50 && strategy.push_counts()[0].applied_steps < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(strategy.push_counts()[0].applied_steps == 2);
  cluster.stop_worker(1);
  coordinator.join();
  const CoordinatorStats stats = coordinator.stats();
  CHECK(stats.reruns == 1);
  CHECK(stats.functions_done == 2);
  CHECK(stats.duplicate_pushes == 1);
  for (RemoteValue& v : values) CHECK(v.worker() == 0);
  const std::vector<ParameterServerStrategy::PushCounts> counts = strategy.push_counts();
  CHECK(counts[0].applied_steps == 2);
  CHECK(counts[0].duplicate_pushes == 1);
  // Two steps of gradient 1 at SGD rate 0.5, not three: the re-run's push was dropped.
  const Tensor w = strategy.read_variables().at("w");
  for (int64_t i = 0; i < 4; ++i) CHECK(w.data<float>()[i] == static_cast<float>(i) - 1.0f);
}

TEST_CASE("a lost parameter server ends join with its name; no worker ends it too") {
  const FunctionRegistry registry = make_registry();
  {
    LocalCluster cluster(1, 2, registry);
    ParameterServerStrategy strategy(cluster.spec(), fast_options());
    ClusterCoordinator coordinator(strategy);
    coordinator.schedule("sleep", "3000");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the watchdog has seen ps:1
    cluster.stop_ps(1);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(coordinator.join(),
                      StartsWith("[ClusterCoordinator::join] lost task ps:1 at " +
                                 cluster.spec().parameter_servers()[1] + ": no answer for"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  {
    LocalCluster cluster(1, 1, registry);
    cluster.stop_worker(0);
    ParameterServerStrategy strategy(cluster.spec(), fast_options());
    ClusterCoordinator::Options options;
    options.no_worker_timeout = std::chrono::milliseconds(800);
    options.log = false;
    ClusterCoordinator coordinator(strategy, options);
    coordinator.schedule("echo");
    CHECK_THROWS_MATCHES(coordinator.join(), CommunicationError,
                         Message("[ClusterCoordinator::join] no worker has answered for 800 ms; "
                                 "1 functions wait"));
  }
}
