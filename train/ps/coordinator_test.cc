// ClusterCoordinator semantics (schedule, join, done, RemoteValue, per-worker datasets), the
// servers' asynchronous updates, and losing workers and servers, on a cluster of real gRPC
// servers inside this process (train/ps/local_cluster.h).
#include "train/ps/coordinator.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
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

constexpr std::chrono::seconds kEventWait{30};  // bounds every wait on an event below

// Events that the test and the functions it schedules wait for instead of sleeping, so that no
// case depends on how fast a loaded host runs a thread: which workers started a function, and a
// gate that the test opens. Every wait is bounded by kEventWait.
class Events {
 public:
  // Records that a function started on `worker`.
  void started(int64_t worker) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++started_[worker];
    }
    cv_.notify_all();
  }
  // Waits until the functions started on each worker reach `counts` (worker -> count).
  bool wait_started(const std::map<int64_t, int>& counts) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventWait, [&] {
      for (const auto& [w, n] : counts) {
        if (started_[w] < n) return false;
      }
      return true;
    });
  }
  bool wait_any_started() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventWait, [&] { return !started_.empty(); });
  }
  void open_gate() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait_gate() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kEventWait, [&] { return open_; });
  }
  // Forgets the starts and closes the gate (for the next phase of a case).
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    started_.clear();
    open_ = false;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, int> started_;
  bool open_ = false;
};

// Opens the gate when a case ends, also by a failed REQUIRE: a function still waiting there would
// otherwise hold the coordinator's destructor for kEventWait. Declare it after the coordinator.
struct OpenGateAtExit {
  Events& events;
  ~OpenGateAtExit() { events.open_gate(); }
};

// Waits (bounded by kEventWait) until `done` holds, polling every 10 ms.
template <typename Predicate>
bool eventually(Predicate done) {
  const auto end = std::chrono::steady_clock::now() + kEventWait;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

FunctionRegistry make_registry(const std::shared_ptr<Events>& events = std::make_shared<Events>()) {
  FunctionRegistry r;
  r.add_function("echo", [](WorkerContext& c, const std::string& args) {
    return args + "@" + std::to_string(c.worker_index());
  });
  // Returns the worker's index once the test opens the gate.
  r.add_function("wait_gate", [events](WorkerContext& c, const std::string&) {
    events->started(c.worker_index());
    if (!events->wait_gate()) throw_error<InvalidArgumentError>("wait_gate", "never opened");
    return std::to_string(c.worker_index());
  });
  // Returns the worker's index once both workers have started one.
  r.add_function("meet", [events](WorkerContext& c, const std::string&) {
    events->started(c.worker_index());
    if (!events->wait_started({{0, 1}, {1, 1}})) {
      throw_error<InvalidArgumentError>("meet", "the other worker never came");
    }
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
  // A ones_step on worker 0 once worker 1 has started one (so that each takes one); on worker 1 a
  // ones_step, then a wait for the gate before the reply (in which the test stops worker 1: lost
  // between its push and its reply).
  r.add_function("push_then_wait", [events, ones = r.function("ones_step")](
                                       WorkerContext& c, const std::string& args) {
    events->started(c.worker_index());
    if (c.worker_index() == 0 && !events->wait_started({{1, 1}})) {
      throw_error<InvalidArgumentError>("push_then_wait", "worker 1 never started");
    }
    const std::string result = (*ones)(c, args);
    if (c.worker_index() == 1) events->wait_gate();
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
  // Not the point of most cases, and a loaded host may leave a server's pings unanswered for a
  // second: the lost-server case shortens it.
  o.watchdog.lost_after = std::chrono::milliseconds(10000);
  return o;
}

Tensor arange(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

}  // namespace

TEST_CASE("schedule returns RemoteValues that join and done settle") {
  const auto events = std::make_shared<Events>();
  const FunctionRegistry registry = make_registry(events);
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
  // done() is false while a function waits at the gate, and fetch() waits for it.
  const OpenGateAtExit open_at_exit{*events};
  RemoteValue slow = coordinator.schedule("wait_gate");
  CHECK_FALSE(coordinator.done());
  CHECK_FALSE(slow.is_ready());
  // The gate opens once the function runs, most likely while fetch() waits.
  std::thread opener([&] {
    events->wait_any_started();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    events->open_gate();
  });
  CHECK(slow.fetch().size() == 1);
  opener.join();
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
  const auto events = std::make_shared<Events>();
  const FunctionRegistry registry = make_registry(events);
  LocalCluster cluster(1, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator coordinator(strategy);
  const OpenGateAtExit open_at_exit{*events};
  RemoteValue slow = coordinator.schedule("wait_gate");
  CHECK_THROWS_MATCHES(slow.fetch(std::chrono::milliseconds(100)), CommunicationError,
                       Message("[RemoteValue::fetch] no result after 100 ms"));
  events->open_gate();
  CHECK(slow.fetch() == "0");
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
  CHECK(bias.shards[1].ps() == 0);

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
  // Each element moved as far as its shard's server moved: kernel rows 0-2 and 5-6 and bias row 1
  // live on server 0, kernel rows 3-4 and bias row 0 on server 1. (Bias row 1 was once expected
  // on server 1: wrong only when the two servers saw different staleness, 1 run in 30 with six
  // copies at once.)
  for (const ShardedVariable* v : {&kernel, &bias}) {
    const Tensor& value = values.at(v->name);
    const int64_t row_size = value.num_elements() / v->shape[0];
    for (const rpc::ShardPlacement& at : v->shards) {
      for (int64_t i = at.row_offset() * row_size; i < (at.row_offset() + at.rows()) * row_size;
           ++i) {
        INFO(v->name << " element " << i << " on ps:" << at.ps());
        CHECK(value.data<float>()[i] ==
              Approx(static_cast<double>(i) - moved[at.ps()]).margin(1e-5));
      }
    }
  }
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

// Stops worker 1 of `cluster` while its function waits at the gate: its server cancels the call
// after a second's grace and the coordinator counts worker 1 lost; then the gate opens.
void stop_worker_1_at_the_gate(LocalCluster& cluster, const ClusterCoordinator& coordinator,
                               Events& events) {
  std::thread stopper([&] { cluster.stop_worker(1); });
  CHECK(eventually([&] { return coordinator.stats().workers_lost == 1; }));
  events.open_gate();
  stopper.join();
}

TEST_CASE("a lost worker's functions run on the others, and a restarted worker rejoins") {
  const auto events = std::make_shared<Events>();
  const FunctionRegistry registry = make_registry(events);
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  ClusterCoordinator::Options options;
  options.log = false;
  ClusterCoordinator coordinator(strategy, options);
  const OpenGateAtExit open_at_exit{*events};
  // Worker 1 is stopped while its function waits at the gate, so the coordinator gives the
  // function to worker 0.
  std::vector<RemoteValue> values;
  for (int i = 0; i < 3; ++i) values.push_back(coordinator.schedule("wait_gate"));
  REQUIRE(events->wait_started({{0, 1}, {1, 1}}));
  stop_worker_1_at_the_gate(cluster, coordinator, *events);
  coordinator.join();
  for (RemoteValue& v : values) CHECK(v.fetch() == "0");
  CoordinatorStats stats = coordinator.stats();
  CHECK(stats.reruns == 1);
  CHECK(stats.functions_done == 3);
  CHECK(stats.workers_lost == 1);
  CHECK(coordinator.live_workers() == 1);

  cluster.start_worker(1);
  CHECK(eventually([&] { return coordinator.live_workers() == 2; }));
  // Both workers run functions again: each "meet" waits until both have started one.
  events->reset();
  std::set<int64_t> workers;
  std::vector<RemoteValue> after;
  for (int i = 0; i < 6; ++i) after.push_back(coordinator.schedule("meet"));
  coordinator.join();
  for (RemoteValue& v : after) workers.insert(v.worker());
  CHECK(workers == std::set<int64_t>{0, 1});
  CHECK(coordinator.stats().workers_joined == 3);
}

TEST_CASE("a step re-run after its worker was lost between push and reply is applied once") {
  const auto events = std::make_shared<Events>();
  const FunctionRegistry registry = make_registry(events);
  LocalCluster cluster(2, 1, registry);
  ParameterServerStrategy strategy(cluster.spec(), fast_options());
  strategy.create_sharded_variable(arange({4}), "w");
  ClusterCoordinator::Options options;
  options.log = false;
  ClusterCoordinator coordinator(strategy, options);
  const OpenGateAtExit open_at_exit{*events};
  REQUIRE(eventually([&] { return coordinator.live_workers() == 2; }));
  // Worker 1 takes one step (worker 0 waits for it to start before taking the other), pushes,
  // and waits at the gate.
  std::vector<RemoteValue> values;
  for (int i = 0; i < 2; ++i) values.push_back(coordinator.schedule("push_then_wait"));
  REQUIRE(eventually([&] { return strategy.push_counts()[0].applied_steps == 2; }));
  stop_worker_1_at_the_gate(cluster, coordinator, *events);
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
  const auto events = std::make_shared<Events>();
  const FunctionRegistry registry = make_registry(events);
  {
    LocalCluster cluster(1, 2, registry);
    StrategyOptions fast_loss = fast_options();
    // Lost after a second's silence, whether or not the watchdog had heard ps:1 before.
    fast_loss.watchdog.lost_after = fast_loss.watchdog.first_contact =
        std::chrono::milliseconds(1000);
    ParameterServerStrategy strategy(cluster.spec(), fast_loss);
    ClusterCoordinator coordinator(strategy);
    const OpenGateAtExit open_at_exit{*events};
    // The function waits at the gate until the case ends: join ends only by the lost server.
    coordinator.schedule("wait_gate");
    REQUIRE(events->wait_started({{0, 1}}));
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
