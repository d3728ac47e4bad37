// ParameterServerStrategy (tf.distribute.ParameterServerStrategy), on the coordinator: the
// cluster, the partitioned variables and where their shards live, and the optimizer the servers
// apply. Workers run what a ClusterCoordinator (coordinator.h) schedules on them.
//
// As a keras::Strategy it is the coordinator's own one-device strategy (replica=1): a model
// built in its scope there is a local copy for evaluation, which read_variables() fills. The
// training variables live on the servers: create_sharded_variable splits one along dim 0 with the
// partitioner (whole when there is none) and places shard k of the i-th shard created overall on
// ps:(i mod P), round robin, as TF does.
//
// Shards are named "<variable>/part_<k>". Creating variables resets each server's optimizer step
// to 0 (the job starts); restore (checkpoint.h) sets it to the checkpoint's.
//
// The strategy serves Control on the chief's address (so workers and servers can watch it) and
// watches every server: a lost one makes lost_task() say so within Watchdog::Options::lost_after,
// and the coordinator's join and fetch throw it.
//
// Ownership: copies share the cluster state. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/keras/strategy.h"
#include "train/ps/cluster_spec.h"
#include "train/ps/partitioner.h"
#include "train/ps/ps.grpc.pb.h"
#include "train/ps/rpc.h"

namespace dtensor::ps {

struct ShardedVariable {
  std::string name;
  Shape shape;
  std::vector<rpc::ShardPlacement> shards;
  std::string shard_name(int64_t k) const { return name + "/part_" + std::to_string(k); }
};

struct StrategyOptions {
  Partitioner partitioner;  // empty: variables are not split
  std::string optimizer = "adam";
  double learning_rate = 1e-3;
  // > 0: the servers decay the learning rate along tf's CosineDecay over this many optimizer
  // steps (pushes applied) to learning_rate * lr_decay_alpha; 0 keeps it constant.
  int64_t lr_decay_steps = 0;
  double lr_decay_alpha = 0.0;
  double rpc_timeout_s = 30;
  double connect_timeout_s = 60;  // how long the constructor waits for every server to answer
  Watchdog::Options watchdog;
  bool serve_control = true;  // serve Control on the chief's address
};

class ParameterServerStrategy : public keras::Strategy {
 public:
  // `cluster` seen from the chief. Waits up to options.connect_timeout_s for every server to
  // answer (tasks start in any order). CommunicationError when the chief's address is taken or a
  // server does not answer: "[ParameterServerStrategy] ps:<k> at <address> did not answer within
  // <t> s: <status>".
  explicit ParameterServerStrategy(const ClusterSpec& cluster, StrategyOptions options = {});

  const ClusterSpec& cluster() const;
  const StrategyOptions& options() const;
  int64_t num_workers() const { return cluster().num_workers(); }
  int64_t num_ps() const { return cluster().num_ps(); }

  // Partitions `initial` (f32) over the servers and assigns its shards there (one Assign RPC per
  // server that gets one). InvalidArgumentError for a repeated or empty name; CommunicationError
  // for a server that does not answer in time.
  ShardedVariable create_sharded_variable(const Tensor& initial, const std::string& name) const;
  std::vector<ShardedVariable> sharded_variables() const;

  // Every variable's whole value (and, with_slots, each optimizer slot as "<variable>/<slot>"),
  // pulled from the servers; `step` gets ps:0's optimizer step.
  std::map<std::string, Tensor> read_variables(bool with_slots = false,
                                               int64_t* step = nullptr) const;
  // Splits each whole value (variables and "<variable>/<slot>" slots) into the current shards and
  // assigns them, with optimizer step `step`, on every server.
  void assign_variables(const std::map<std::string, Tensor>& values, int64_t step) const;
  // Staleness of every push the servers applied so far (all servers' lists concatenated).
  std::vector<int64_t> staleness() const;
  // What each server applied: distinct steps and the repeated pushes it dropped.
  struct PushCounts {
    int64_t applied_steps = 0, duplicate_pushes = 0;
  };
  std::vector<PushCounts> push_counts() const;
  // A fresh id for a scheduled function (1, 2, ... over every coordinator of this strategy), so
  // that servers apply its pushes once however often it runs.
  int64_t next_step_id() const;

  // The lost server's message, once the watchdog noticed one.
  std::optional<std::string> lost_task() const;

  rpc::ParameterServer::Stub& ps_stub(int64_t ps) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace dtensor::ps
