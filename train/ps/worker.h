// The worker task: runs the functions the coordinator schedules on it (by name, from a
// FunctionRegistry every task of the job builds alike, since C++ cannot ship closures), with a
// WorkerContext through which a function pulls the variables' shards and pushes gradients.
//
// A function takes bytes and returns bytes (its RemoteValue); what they mean is between the
// program's coordinator and its functions. The coordinator configures a worker (variables,
// where their shards live, datasets to build) before its first function and again after it
// rejoins; a worker that was restarted refuses functions until then (FAILED_PRECONDITION).
//
// Thread-safety: WorkerService runs one function at a time; a FunctionRegistry is filled before
// serving and only read after.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "train/data/dataset.h"
#include "train/keras/strategy.h"
#include "train/ps/ps.grpc.pb.h"
#include "train/ps/rpc.h"

namespace dtensor::ps {

class WorkerContext;

class FunctionRegistry {
 public:
  using Function = std::function<std::string(WorkerContext& context, const std::string& args)>;
  // InvalidArgumentError "[FunctionRegistry::add_function] ..." for an empty or repeated name.
  void add_function(const std::string& name, Function fn);
  // A per-worker dataset: each worker calls fn with InputContext(num_workers, worker_index,
  // num_workers) (tf's create_per_worker_dataset). Errors as add_function.
  void add_dataset(const std::string& name, keras::DatasetFn fn);
  const Function* function(const std::string& name) const;
  const keras::DatasetFn* dataset(const std::string& name) const;

 private:
  std::map<std::string, Function> functions_;
  std::map<std::string, keras::DatasetFn> datasets_;
};

// What a function sees on its worker.
class WorkerContext {
 public:
  struct Timing {
    double rpc_seconds = 0;  // in pull and push
  };
  int64_t worker_index() const { return worker_index_; }
  int64_t num_workers() const { return num_workers_; }
  // The step id the coordinator gave the running function (ParameterServerStrategy::next_step_id;
  // a re-run keeps its id).
  int64_t step_id() const { return step_id_; }
  // Every variable's whole value, by name: one Pull per parameter server. CommunicationError
  // "[WorkerContext::pull] lost task ps:<k> ..." when a server does not answer in time.
  std::map<std::string, Tensor> pull();
  // Splits each variable's gradient (whole shape, by variable name) into its shards and pushes
  // each server its part (one Push each), tagged with the versions of the last pull and with
  // the running function's step id and this push's index in the run (servers apply each once).
  // InvalidArgumentError for an unknown name or a gradient of the wrong shape;
  // CommunicationError as pull's.
  void push(const std::map<std::string, Tensor>& gradients);
  // The dataset create_per_worker_dataset named; InvalidArgumentError for one not created.
  data::Dataset& dataset(const std::string& name);
  const Timing& timing() const { return timing_; }

 private:
  friend class WorkerService;
  int64_t worker_index_ = 0, num_workers_ = 1;
  double rpc_timeout_s_ = 30;
  std::vector<rpc::VariableSpec> variables_;
  std::vector<std::string> ps_addresses_;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> ps_;
  std::vector<int64_t> pulled_versions_;
  int64_t step_id_ = 0;           // of the function running (0: none)
  int64_t pushes_ = 0;            // push() calls in this run
  int64_t duplicate_pushes_ = 0;  // pushes of this run that a server had applied already
  std::map<std::string, data::Dataset> datasets_;
  Timing timing_;
};

class WorkerService final : public rpc::Worker::Service {
 public:
  // `registry` must outlive the service. RPCs to servers get `rpc_timeout_s` each.
  explicit WorkerService(const FunctionRegistry& registry, double rpc_timeout_s = 30);

  grpc::Status Configure(grpc::ServerContext*, const rpc::ConfigureRequest* request,
                         rpc::ConfigureReply* reply) override;
  grpc::Status Run(grpc::ServerContext*, const rpc::RunRequest* request,
                   rpc::RunReply* reply) override;

 private:
  const FunctionRegistry& registry_;
  std::mutex mu_;
  int64_t generation_ = -1;
  WorkerContext context_;
};

// Runs the worker task spec.task() until the chief shuts it down (returns its reason) or a watched
// task is lost (CommunicationError; see serve_task). Its RPCs to servers get 10 s each.
std::string run_worker(const ClusterSpec& spec, const FunctionRegistry& registry,
                       Watchdog::Options options = {});

}  // namespace dtensor::ps
