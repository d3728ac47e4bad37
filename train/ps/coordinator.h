// ClusterCoordinator (tf.distribute.experimental.coordinator.ClusterCoordinator): schedules
// functions on the workers of a ParameterServerStrategy and survives losing workers.
//
//   ParameterServerStrategy strategy(ClusterSpec::from_environment(), options);
//   ClusterCoordinator coordinator(strategy);
//   PerWorkerDataset data = coordinator.create_per_worker_dataset("mnist");
//   RemoteValue loss = coordinator.schedule("train_step", args);
//   coordinator.join();                      // every scheduled function has run
//   double l = decode(loss.fetch());
//
// schedule() queues a function (by its name in the workers' FunctionRegistry) and returns at
// once; a free worker takes it (one function at a time per worker, in queue order). A worker that
// is lost while running one (unreachable, reset, or past the RPC deadline) gives it back: the
// function goes to the front of the queue and another worker runs it, so a function runs at
// least once and its RemoteValue holds the result of the run that finished. Its gradients are
// applied exactly once: schedule() gives each function a step id (strategy.next_step_id()) that
// every run of it carries to its pushes, and the servers drop a repeated push (a worker lost
// between its push and its reply; parameter_server.h). The coordinator
// keeps knocking on a lost worker (every 0.5 s); when it answers again (restarted), it is
// configured afresh (variables, datasets) and takes functions again.
//
// A function that fails on its worker (it threw) is not retried: its RemoteValue holds the error
// and join() / done() throw the first such error (InvalidArgumentError naming the function and
// the worker, or CommunicationError when it lost a parameter server). A lost parameter server
// (the strategy's watchdog) makes join, done and fetch throw CommunicationError naming it.
//
// Every wait is bounded: join() throws CommunicationError when no worker has answered for
// `no_worker_timeout`; fetch() when its timeout passes.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "train/ps/strategy.h"

namespace dtensor::ps {

// The result of a scheduled function (tf's RemoteValue).
class RemoteValue {
 public:
  // Whether the function has finished (with a result or an error).
  bool is_ready() const;
  // The function's result, waiting up to `timeout` for it. Throws the function's error, or
  // CommunicationError "[RemoteValue::fetch] ..." when the timeout passes or a server was lost.
  std::string fetch(std::chrono::milliseconds timeout = std::chrono::seconds(120)) const;
  // The worker whose run of it finished (-1 before).
  int64_t worker() const;

 private:
  friend class ClusterCoordinator;
  RemoteValue() = default;  // only schedule() makes one
  struct State;
  std::shared_ptr<State> state_;
};

// Names a dataset every worker built with its registered function (tf's PerWorkerDataset).
struct PerWorkerDataset {
  std::string name;
};

struct CoordinatorStats {
  int64_t functions_done = 0;
  int64_t reruns = 0;            // functions given back by a lost worker and run again
  int64_t duplicate_pushes = 0;  // pushes of re-runs that the servers had applied already
  int64_t workers_lost = 0, workers_joined = 0;
  double rpc_seconds = 0, compute_seconds = 0;  // summed over the functions' successful runs
};

class ClusterCoordinator {
 public:
  struct Options {
    double run_timeout_s = 60;       // deadline of one function's run
    double configure_timeout_s = 2;  // deadline of configuring (and knocking on) a worker
    std::chrono::milliseconds no_worker_timeout{60000};
    bool log = true;  // a line on stderr when a worker is lost or joins
  };
  // `strategy` must outlive the coordinator. Starts one dispatcher thread per worker.
  explicit ClusterCoordinator(const ParameterServerStrategy& strategy);
  ClusterCoordinator(const ParameterServerStrategy& strategy, Options options);
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  RemoteValue schedule(const std::string& function, std::string args = "");
  // Waits until every scheduled function has finished; throws the first function error, a lost
  // server, or no worker for no_worker_timeout (see the header comment).
  void join();
  // Whether every scheduled function has finished; throws as join does.
  bool done();
  // Has every worker build `name` with its registered dataset function (before its next
  // function; a rejoining worker builds it again).
  PerWorkerDataset create_per_worker_dataset(const std::string& name);

  const ParameterServerStrategy& strategy() const { return strategy_; }
  CoordinatorStats stats() const;
  // Workers that answered their last RPC.
  int64_t live_workers() const;

 private:
  struct Closure;
  void dispatch(int64_t worker);
  void throw_if_failed(const char* fn);  // with mu_ held
  bool wait_for(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout);

  const ParameterServerStrategy& strategy_;
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Closure>> queue_;
  int64_t in_flight_ = 0;
  int64_t generation_ = 0;
  std::vector<std::string> datasets_;
  std::vector<bool> alive_;
  std::chrono::steady_clock::time_point last_alive_;
  std::optional<std::string> first_error_;
  bool first_error_lost_ps_ = false;
  bool stopping_ = false;
  CoordinatorStats stats_;
  std::vector<std::thread> threads_;
};

}  // namespace dtensor::ps
