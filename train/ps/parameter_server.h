// The parameter server: holds shards of partitioned variables with their optimizer slots and
// applies each gradient pushed to it on arrival (no barrier across workers): the asynchronous
// half of tf.distribute's ParameterServerStrategy.
//
// One optimizer per server (SGD or Adam of train/optim, over its shards as DVariables on a
// one-device mesh of this process); its step counts the pushes applied, and is the "version" a
// pull reports. Staleness of a push = version when applied - version its gradients were
// computed at.
//
// Thread-safety: the service is called from gRPC's threads; one mutex orders pulls and pushes.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
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
  std::vector<int64_t> staleness_;
};

// The optimizer `config` names ("sgd" or "adam" with its learning rate); InvalidArgumentError
// "[make_optimizer] ..." for another type or a learning rate <= 0.
std::unique_ptr<Optimizer> make_optimizer(const rpc::OptimizerConfig& config);

// Runs the ps task spec.task() until the chief shuts it down (returns its reason) or a watched task
// is lost (CommunicationError naming it; see serve_task).
std::string run_parameter_server(const ClusterSpec& spec, Watchdog::Options options = {});

}  // namespace dtensor::ps
