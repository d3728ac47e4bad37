// The parameter server: holds shards of partitioned variables with their optimizer slots and
// applies each gradient pushed to it on arrival (no barrier across workers): the asynchronous
// half of tf.distribute's ParameterServerStrategy.
//
// One optimizer per server (SGD or Adam of train/optim, over its shards as DVariables on a
// one-device mesh of this process); its step counts the pushes applied, and is the "version" a
// pull reports. Staleness of a push = version when applied - version its gradients were
// computed at.
//
// A stale push moves the variables less: it is applied with learning rate lr / staleness when its
// staleness is 2 or more (Zhang et al., "Staleness-aware Async-SGD", 2016). Adam's step is about
// lr per element whatever the gradient's size, so a gradient computed two or more steps back
// applied at full rate overshoots, and the overshoots feed later gradients: on the example's MLP
// a steady staleness of 2 ends at a test accuracy of 0.78-0.86 where synchronous training reaches
// 0.96-0.98. Staleness 0 and 1 (the common case with two workers) keep the full rate.
//
// Exactly once: a push tagged with a step id (the coordinator's id of the scheduled function,
// ps.proto PushRequest) is applied at most once per (step id, push index). A worker lost between
// its push and its reply has its function re-run elsewhere, and the re-run's push is
// acknowledged as a duplicate without touching the variables, the optimizer's step or the
// staleness list. The server keeps one entry per applied tagged push.
//
// Thread-safety: the service is called from gRPC's threads; one mutex orders pulls and pushes.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/variable.h"
#include "train/optim/optimizers.h"
#include "train/ps/ps.grpc.pb.h"
#include "train/ps/rpc.h"

namespace dtensor::ps {

class ParameterServerService final : public rpc::ParameterServer::Service {
 public:
  ParameterServerService();
  ~ParameterServerService() override;

  grpc::Status Assign(grpc::ServerContext*, const rpc::AssignRequest* request,
                      rpc::AssignReply* reply) override;
  grpc::Status Pull(grpc::ServerContext*, const rpc::PullRequest* request,
                    rpc::PullReply* reply) override;
  grpc::Status Push(grpc::ServerContext*, const rpc::PushRequest* request,
                    rpc::PushReply* reply) override;
  grpc::Status Stats(grpc::ServerContext*, const rpc::StatsRequest* request,
                     rpc::StatsReply* reply) override;

 private:
  std::mutex mu_;
  Mesh mesh_;
  std::map<std::string, DVariable> shards_;
  std::unique_ptr<Optimizer> optimizer_;
  double lr_scale_ = 1.0;  // of the push being applied (the optimizer's schedule reads it)
  std::vector<int64_t> staleness_;
  std::set<std::pair<int64_t, int64_t>> applied_;  // (step id, push index) of tagged pushes
  std::set<int64_t> applied_steps_;
  int64_t duplicate_pushes_ = 0;
};

// The optimizer `config` names ("sgd" or "adam" with its learning rate); InvalidArgumentError
// "[make_optimizer] ..." for another type, a learning rate <= 0 or a bad cosine decay. Its rate at
// optimizer step s is config's (cosine-decayed at s when cosine_decay_steps > 0), times *lr_scale
// at each apply when `lr_scale` is given (the pointee must outlive the optimizer).
std::unique_ptr<Optimizer> make_optimizer(const rpc::OptimizerConfig& config,
                                          const double* lr_scale = nullptr);
// The factor of the learning rate for a push of `staleness`: 1 up to 1, 1 / staleness above.
double staleness_lr_scale(int64_t staleness);

// Runs the ps task spec.task() until the chief shuts it down (returns its reason) or a watched task
// is lost (CommunicationError naming it; see serve_task).
std::string run_parameter_server(const ClusterSpec& spec, Watchdog::Options options = {});

}  // namespace dtensor::ps
