// ClusterSpec: TF_CONFIG-style documents, and the exact error of each malformed one.
#include "train/ps/cluster_spec.h"

#include <catch2/catch.hpp>
#include <cstdlib>

#include "runtime/error.h"

using namespace dtensor;
using namespace dtensor::ps;
using Catch::Matchers::Message;

namespace {

const char* const kGood = R"({"cluster": {"chief": ["127.0.0.1:7000"],
  "worker": ["127.0.0.1:7001", "127.0.0.1:7002"], "ps": ["127.0.0.1:7003"]},
  "task": {"type": "worker", "index": 1}})";

std::string with_task(const std::string& type, int index) {
  return R"({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4"]},
    "task": {"type": ")" +
         type + R"(", "index": )" + std::to_string(index) + "}}";
}

}  // namespace

TEST_CASE("ClusterSpec reads the tasks and this process's task") {
  const ClusterSpec spec = ClusterSpec::parse(kGood);
  CHECK(spec.chief() == "127.0.0.1:7000");
  CHECK(spec.num_workers() == 2);
  CHECK(spec.num_ps() == 1);
  CHECK(spec.task().str() == "worker:1");
  CHECK(spec.address({TaskType::kPs, 0}) == "127.0.0.1:7003");
  CHECK(spec.address(spec.task()) == "127.0.0.1:7002");
  CHECK(spec.as_task({TaskType::kChief, 0}).task().str() == "chief:0");
  const ClusterSpec again = ClusterSpec::parse(spec.to_json());
  CHECK(again.workers() == spec.workers());
  CHECK(again.task() == spec.task());
  CHECK(ClusterSpec::parse(with_task("coordinator", 0)).task().str() == "chief:0");
}

TEST_CASE("ClusterSpec from TF_CONFIG") {
  ::setenv("TF_CONFIG", kGood, 1);
  CHECK(ClusterSpec::from_environment().task().str() == "worker:1");
  ::unsetenv("TF_CONFIG");
  CHECK_THROWS_MATCHES(ClusterSpec::from_environment(), InvalidArgumentError,
                       Message("[ClusterSpec] TF_CONFIG is not set"));
}

TEST_CASE("ClusterSpec errors name the task or field at fault") {
  CHECK_THROWS_MATCHES(ClusterSpec::parse(with_task("worker", 2)), InvalidArgumentError,
                       Message("[ClusterSpec] task worker:2 out of range: the cluster has 2 "
                               "worker tasks"));
  CHECK_THROWS_MATCHES(ClusterSpec::parse(with_task("ps", -1)), InvalidArgumentError,
                       Message("[ClusterSpec] task ps:-1 out of range: the cluster has 1 ps task"));
  CHECK_THROWS_MATCHES(ClusterSpec::parse(with_task("evaluator", 0)), InvalidArgumentError,
                       Message("[ClusterSpec] task type 'evaluator' is not one of chief, worker, "
                               "ps"));
  CHECK_THROWS_MATCHES(ClusterSpec::parse(R"({"cluster": {"worker": ["h:2"], "ps": ["h:4"]},
                             "task": {"type": "ps", "index": 0}})"),
                       InvalidArgumentError,
                       Message("[ClusterSpec] the cluster needs exactly 1 chief, has 0"));
  CHECK_THROWS_MATCHES(ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "ps": ["h:4"]},
                             "task": {"type": "ps", "index": 0}})"),
                       InvalidArgumentError,
                       Message("[ClusterSpec] the cluster has no worker task"));
  CHECK_THROWS_MATCHES(ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]},
                             "task": {"type": "chief", "index": 0}})"),
                       InvalidArgumentError, Message("[ClusterSpec] the cluster has no ps task"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2", "h"], "ps": ["h:4"]},
                             "task": {"type": "chief", "index": 0}})"),
      InvalidArgumentError, Message("[ClusterSpec] address 'h' of worker:1 is not host:port"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:70000"]},
                             "task": {"type": "chief", "index": 0}})"),
      InvalidArgumentError, Message("[ClusterSpec] address 'h:70000' of ps:0 is not host:port"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:2"]},
                             "task": {"type": "chief", "index": 0}})"),
      InvalidArgumentError, Message("[ClusterSpec] address 'h:2' of ps:0 is used by another task"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"task": {"type": "chief", "index": 0}})"), InvalidArgumentError,
      Message(R"([ClusterSpec] no "cluster" object in {"task": {"type": "chief", "index": 0}})"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:4"]}})"),
      InvalidArgumentError,
      Message(
          R"([ClusterSpec] no "task" object with a string "type" and an integer "index" in {"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:4"]}})"));
  CHECK_THROWS_MATCHES(
      ClusterSpec::parse(R"({"cluster": {"chief": "h:1", "worker": ["h:2"], "ps": ["h:4"]},
                             "task": {"type": "chief", "index": 0}})"),
      InvalidArgumentError,
      Message(R"([ClusterSpec] cluster.chief must be a list of "host:port" strings)"));
  CHECK_THROWS_AS(ClusterSpec::parse("{not json"), InvalidArgumentError);
  CHECK_THROWS_WITH(ClusterSpec::parse("{not json"),
                    Catch::Matchers::StartsWith("[ClusterSpec] not valid JSON: "));
}
