// A parameter-server cluster inside one test process: real gRPC servers on 127.0.0.1 ports, one
// per task, whose tasks can be stopped (as a lost machine) and started again on the same port.
// Every task's port (the chief's too, which the test's strategy serves) is a ReservedPort held
// as long as the cluster.
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

// A port of 127.0.0.1 held for this object's lifetime by a bound socket (SO_REUSEADDR, not
// listening): no bind to it or to port 0 and no outgoing connection takes it, while a gRPC server
// (which sets SO_REUSEADDR) may listen on it, stop, and listen on it again. A port picked free,
// released and bound later can be taken in between by a test running beside this one ("cannot
// listen on 127.0.0.1:<port> (chief:0)" with six copies of coordinator_test at once). Nothing
// listening, it refuses connections. Throws IoError "[ReservedPort] ..." when it cannot bind.
class ReservedPort {
 public:
  ReservedPort();
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

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
  std::vector<std::unique_ptr<ReservedPort>> ports_;  // before the servers: outlives them
  ClusterSpec spec_;
  std::vector<std::unique_ptr<ParameterServerService>> ps_;
  std::vector<std::unique_ptr<WorkerService>> workers_;
  std::vector<std::unique_ptr<TaskServer>> ps_servers_, worker_servers_;
};

}  // namespace dtensor::ps::testing
