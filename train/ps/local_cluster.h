// A parameter-server cluster inside one test process: real gRPC servers on 127.0.0.1 ports, one
// per task, whose tasks can be stopped (as a lost machine) and started again on the same port.
// Test support only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "train/ps/cluster_spec.h"
#include "train/ps/parameter_server.h"
#include "train/ps/rpc.h"
#include "train/ps/worker.h"

namespace dtensor::ps::testing {

// A port on 127.0.0.1 that was free a moment ago.
int free_port();

class LocalCluster {
 public:
  // Starts `num_ps` parameter servers and `num_workers` workers running `registry` (which must
  // outlive the cluster); the chief gets a free port for its strategy to serve on.
  LocalCluster(int64_t num_workers, int64_t num_ps, const FunctionRegistry& registry);
  const ClusterSpec& spec() const { return spec_; }
  // Stops worker `w`'s server (its in-flight RPCs are cancelled after a second).
  void stop_worker(int64_t w);
  // Starts worker `w` afresh (a new, unconfigured WorkerService) on its old port.
  void start_worker(int64_t w);
  void stop_ps(int64_t p);

 private:
  const FunctionRegistry& registry_;
  ClusterSpec spec_;
  std::vector<std::unique_ptr<ParameterServerService>> ps_;
  std::vector<std::unique_ptr<WorkerService>> workers_;
  std::vector<std::unique_ptr<TaskServer>> ps_servers_, worker_servers_;
};

}  // namespace dtensor::ps::testing
