// Regressions of the CI flakes of examples/ps: a port served twice, stale pushes applied at full
// rate, a worker restarted just before the chief ends that was never told to stop; the servers'
// learning-rate decay that keeps the asynchronous run's accuracy steady; repeated pushes of a
// re-run step dropped.
#include "train/ps/rpc.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "runtime/error.h"
#include "train/ps/local_cluster.h"
#include "train/ps/parameter_server.h"
#include "train/ps/tensor_proto.h"

using namespace dtensor;
using namespace dtensor::ps;
using Catch::Matchers::Message;

namespace {

using Clock = std::chrono::steady_clock;

// The chief's view of a cluster of one worker and one server at these addresses.
ClusterSpec one_worker_one_ps(const std::string& worker, const std::string& ps) {
  return ClusterSpec::parse(R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": [")" + worker +
                            R"("], "ps": [")" + ps +
                            R"("]}, "task": {"type": "chief", "index": 0}})");
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("a port that a task serves cannot be served by another task (no SO_REUSEPORT)") {
  TaskServer first("ps:0", "127.0.0.1:0", {});
  const std::string address = "127.0.0.1:" + std::to_string(first.port());
  CHECK_THROWS_MATCHES(TaskServer("ps:0", address, {}), CommunicationError,
                       Message("[TaskServer] cannot listen on " + address + " (ps:0)"));
}

namespace {

// A server holding one f32 zero "w/part_0" under SGD with learning rate 1, `decay_steps` of
// cosine decay to `alpha` (0: constant).
void assign_sgd(ParameterServerService& server, int64_t decay_steps = 0, double alpha = 0) {
  rpc::AssignRequest assign;
  assign.mutable_optimizer()->set_type("sgd");
  assign.mutable_optimizer()->set_learning_rate(1.0);
  assign.mutable_optimizer()->set_cosine_decay_steps(decay_steps);
  assign.mutable_optimizer()->set_cosine_decay_alpha(alpha);
  rpc::ShardValue* shard = assign.add_shards();
  shard->set_name("w/part_0");
  to_proto(Tensor::zeros({1}, DType::kF32), shard->mutable_value());
  rpc::AssignReply assigned;
  REQUIRE(server.Assign(nullptr, &assign, &assigned).ok());
}

// Pushes gradient 1 computed at `pulled_version` (as push `push_index` of step `step_id`; 0:
// untagged), then pulls: the new value and version.
std::pair<float, int64_t> push_one(ParameterServerService& server, int64_t pulled_version,
                                   int64_t step_id = 0, int64_t push_index = 0,
                                   bool duplicate = false) {
  rpc::PushRequest push;
  push.set_pulled_version(pulled_version);
  push.set_step_id(step_id);
  push.set_push_index(push_index);
  rpc::ShardValue* g = push.add_gradients();
  g->set_name("w/part_0");
  Tensor one = Tensor::zeros({1}, DType::kF32);
  one.data<float>()[0] = 1.0f;
  to_proto(one, g->mutable_value());
  rpc::PushReply pushed;
  REQUIRE(server.Push(nullptr, &push, &pushed).ok());
  CHECK(pushed.duplicate() == duplicate);
  rpc::PullRequest pull;
  rpc::PullReply pulled;
  REQUIRE(server.Pull(nullptr, &pull, &pulled).ok());
  return {from_proto(pulled.shards(0).value()).data<float>()[0], pulled.version()};
}

}  // namespace

TEST_CASE("a push of staleness s >= 2 is applied with learning rate lr / s") {
  CHECK(staleness_lr_scale(0) == 1.0);
  CHECK(staleness_lr_scale(1) == 1.0);
  CHECK(staleness_lr_scale(4) == 0.25);
  ParameterServerService server;
  assign_sgd(server);
  // Every push carries gradient 1 computed at version 0; the server is at version 0, 1, 2, 3.
  float expected = 0;
  for (int64_t version = 0; version < 4; ++version) {
    const auto [value, now] = push_one(server, 0);
    expected -= static_cast<float>(version <= 1 ? 1.0 : 1.0 / static_cast<double>(version));
    CHECK(now == version + 1);
    CHECK(std::abs(value - expected) < 1e-6f);
  }
}

TEST_CASE("a server applies each (step id, push index) once and counts the repeats") {
  ParameterServerService server;
  assign_sgd(server);
  CHECK(push_one(server, 0, /*step_id=*/7) == std::pair<float, int64_t>{-1.0f, 1});
  // A re-run of step 7 (its worker was lost before replying): acknowledged, not applied.
  CHECK(push_one(server, 1, 7, 0, /*duplicate=*/true) == std::pair<float, int64_t>{-1.0f, 1});
  CHECK(push_one(server, 1, 7, /*push_index=*/1) == std::pair<float, int64_t>{-2.0f, 2});
  CHECK(push_one(server, 2, 8) == std::pair<float, int64_t>{-3.0f, 3});
  // Untagged pushes (step id 0) are applied every time.
  CHECK(push_one(server, 3) == std::pair<float, int64_t>{-4.0f, 4});
  CHECK(push_one(server, 4) == std::pair<float, int64_t>{-5.0f, 5});
  rpc::StatsRequest request;
  rpc::StatsReply stats;
  REQUIRE(server.Stats(nullptr, &request, &stats).ok());
  CHECK(stats.applied_steps() == 2);
  CHECK(stats.duplicate_pushes() == 1);
  CHECK(stats.staleness_size() == 5);
}

TEST_CASE("the servers decay the learning rate along a cosine over their optimizer steps") {
  ParameterServerService server;
  assign_sgd(server, /*decay_steps=*/4, /*alpha=*/0.1);
  // Fresh pushes (staleness 0): step s moves w by lr(s) = 0.9 * (1 + cos(pi * min(s, 4) / 4)) / 2
  // + 0.1, which stays 0.1 from step 4 on.
  const double pi = std::acos(-1.0);
  double expected = 0;
  for (int64_t step = 0; step < 6; ++step) {
    const auto [value, now] = push_one(server, step);
    const double s = static_cast<double>(std::min<int64_t>(step, 4));
    expected -= 0.9 * 0.5 * (1 + std::cos(pi * s / 4)) + 0.1;
    CHECK(now == step + 1);
    CHECK(std::abs(value - expected) < 1e-5);
  }
  rpc::OptimizerConfig bad;
  bad.set_type("adam");
  bad.set_learning_rate(1e-3);
  bad.set_cosine_decay_steps(10);
  bad.set_cosine_decay_alpha(2);
  CHECK_THROWS_MATCHES(make_optimizer(bad), InvalidArgumentError,
                       Message("[make_optimizer] cosine decay over 10 steps to alpha 2: want steps "
                               ">= 0, 0 <= alpha <= 1"));
}

TEST_CASE("shutdown_tasks reaches a task that starts serving while it asks") {
  const testing::ReservedPort worker_port, ps_port;
  const std::string worker = worker_port.address(), ps = ps_port.address();
  const ClusterSpec spec = one_worker_one_ps(worker, ps);
  TaskServer ps_server("ps:0", ps, {});
  std::unique_ptr<TaskServer> restarted;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    restarted = std::make_unique<TaskServer>("worker:0", worker, std::vector<grpc::Service*>{});
  });
  // A timeout far above the start's 0.7 s, which a loaded host may stretch: what counts is that it
  // returns once every task was told, well before the timeout.
  const double timeout_s = 30;
  const Clock::time_point start = Clock::now();
  shutdown_tasks(spec, "finished", timeout_s);
  const double took = seconds_since(start);
  late.join();
  CHECK(ps_server.wait_for_shutdown(std::chrono::milliseconds(0)) == "finished");
  CHECK(restarted->wait_for_shutdown(std::chrono::milliseconds(1000)) == "finished");
  CHECK(took < timeout_s / 2);
}

TEST_CASE("shutdown_tasks gives up on a task gone for good after its timeout") {
  const testing::ReservedPort worker, ps;  // nothing listens: connections are refused
  const ClusterSpec spec = one_worker_one_ps(worker.address(), ps.address());
  const Clock::time_point start = Clock::now();
  shutdown_tasks(spec, "finished", /*timeout_s=*/0.5);
  const double took = seconds_since(start);
  CHECK(took >= 0.5);
  // Bounded (each ask has a deadline within the timeout); not a measure of speed on a loaded host.
  CHECK(took < 10);
}
