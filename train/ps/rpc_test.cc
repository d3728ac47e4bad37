// Regressions of the CI flakes of examples/ps: a port served twice, stale pushes applied at full
// rate, and a worker restarted just before the chief ends that was never told to stop.
#include "train/ps/rpc.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/error.h"
#include "train/ps/local_cluster.h"
#include "train/ps/parameter_server.h"
#include "train/ps/tensor_proto.h"

using namespace dtensor;
using namespace dtensor::ps;
using Catch::Matchers::Message;

namespace {

using Clock = std::chrono::steady_clock;

std::string free_address() { return "127.0.0.1:" + std::to_string(testing::free_port()); }

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

TEST_CASE("a push of staleness s >= 2 is applied with learning rate lr / s") {
  CHECK(staleness_lr_scale(0) == 1.0);
  CHECK(staleness_lr_scale(1) == 1.0);
  CHECK(staleness_lr_scale(4) == 0.25);
  ParameterServerService server;
  rpc::AssignRequest assign;
  assign.mutable_optimizer()->set_type("sgd");
  assign.mutable_optimizer()->set_learning_rate(1.0);
  rpc::ShardValue* shard = assign.add_shards();
  shard->set_name("w/part_0");
  to_proto(Tensor::zeros({1}, DType::kF32), shard->mutable_value());
  rpc::AssignReply assigned;
  REQUIRE(server.Assign(nullptr, &assign, &assigned).ok());
  // Every push carries gradient 1 computed at version 0; the server is at version 0, 1, 2, 3.
  float expected = 0;
  for (int64_t version = 0; version < 4; ++version) {
    rpc::PushRequest push;
    push.set_pulled_version(0);
    rpc::ShardValue* g = push.add_gradients();
    g->set_name("w/part_0");
    Tensor one = Tensor::zeros({1}, DType::kF32);
    one.data<float>()[0] = 1.0f;
    to_proto(one, g->mutable_value());
    rpc::PushReply pushed;
    REQUIRE(server.Push(nullptr, &push, &pushed).ok());
    expected -= static_cast<float>(version <= 1 ? 1.0 : 1.0 / static_cast<double>(version));
    rpc::PullRequest pull;
    rpc::PullReply pulled;
    REQUIRE(server.Pull(nullptr, &pull, &pulled).ok());
    CHECK(pulled.version() == version + 1);
    CHECK(std::abs(from_proto(pulled.shards(0).value()).data<float>()[0] - expected) < 1e-6f);
  }
}

TEST_CASE("shutdown_tasks reaches a task that starts serving while it asks") {
  const std::string worker = "127.0.0.1:" + std::to_string(testing::free_port());
  const std::string ps = "127.0.0.1:" + std::to_string(testing::free_port());
  const ClusterSpec spec =
      ClusterSpec::parse(R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": [")" + worker +
                         R"("], "ps": [")" + ps + R"("]}, "task": {"type": "chief", "index": 0}})");
  TaskServer ps_server("ps:0", ps, {});
  std::unique_ptr<TaskServer> restarted;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    restarted = std::make_unique<TaskServer>("worker:0", worker, std::vector<grpc::Service*>{});
  });
  const Clock::time_point start = Clock::now();
  shutdown_tasks(spec, "finished", /*timeout_s=*/5);
  const double took = seconds_since(start);
  late.join();
  CHECK(ps_server.wait_for_shutdown(std::chrono::milliseconds(0)) == "finished");
  CHECK(restarted->wait_for_shutdown(std::chrono::milliseconds(1000)) == "finished");
  CHECK(took < 5);
}

TEST_CASE("shutdown_tasks gives up on a task gone for good after its timeout") {
  const ClusterSpec spec = one_worker_one_ps(free_address(), free_address());
  const Clock::time_point start = Clock::now();
  shutdown_tasks(spec, "finished", /*timeout_s=*/0.5);
  const double took = seconds_since(start);
  CHECK(took >= 0.5);
  CHECK(took < 3);
}
