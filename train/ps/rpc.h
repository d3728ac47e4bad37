// The gRPC plumbing every task of a parameter-server job shares: channels, deadlines, the
// Control service (ping, shutdown) and a watchdog that notices lost tasks.
//
// Every RPC carries a deadline (with_deadline); every wait here is bounded. A TaskServer serves
// the Control service plus the task's own services on its address from the cluster spec.
//
// Thread-safety: TaskServer and Watchdog are safe to use from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "train/ps/cluster_spec.h"
#include "train/ps/ps.grpc.pb.h"

namespace dtensor::ps {

// An insecure channel to `address` with no message-size limit (variables can be large).
std::shared_ptr<grpc::Channel> make_channel(const std::string& address);
// A client context whose RPC fails with DEADLINE_EXCEEDED after `seconds`.
std::unique_ptr<grpc::ClientContext> with_deadline(double seconds);
// "UNAVAILABLE: failed to connect ..." for an error status.
std::string status_text(const grpc::Status& status);
// Whether `status` says the other side is gone (unreachable, reset, or silent past the deadline)
// rather than that it answered with an error.
bool is_lost(const grpc::Status& status);
// Throws for a failed RPC to `task` at `address`: CommunicationError "[fn] lost task <task> at
// <address>: <status>" when it is lost (is_lost), InvalidArgumentError "[fn] <task> at <address>
// refused: <status>" otherwise. Returns for an OK status.
void check_status(const char* fn, const grpc::Status& status, const TaskId& task,
                  const std::string& address);

// Serves Control and `services` on `address` (host:port; port 0 picks a free one).
class TaskServer {
 public:
  // CommunicationError "[TaskServer] cannot listen on <address> (<task>)" when the port is taken.
  TaskServer(std::string task, const std::string& address, std::vector<grpc::Service*> services);
  ~TaskServer();
  TaskServer(const TaskServer&) = delete;
  TaskServer& operator=(const TaskServer&) = delete;

  int port() const { return port_; }
  // Waits up to `timeout` for a Shutdown RPC or stop(); returns its reason, or nullopt.
  std::optional<std::string> wait_for_shutdown(std::chrono::milliseconds timeout);
  // Ends wait_for_shutdown with `reason` (the first reason wins).
  void stop(const std::string& reason);

 private:
  class ControlService;
  std::unique_ptr<ControlService> control_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::string> reason_;
};

// Pings tasks every `interval`; a task that has not answered for `lost_after` (counted from its
// last answer, or from start() for one never heard from, with `first_contact` instead) is lost:
// on_lost(task, message) runs once, on the watchdog's thread, and watching stops.
class Watchdog {
 public:
  struct Options {
    std::chrono::milliseconds interval{500};
    std::chrono::milliseconds lost_after{3000};
    // A task that never answered (the chief gone before a restarted worker came up) is lost after
    // this long: the task ends itself instead of waiting for the launcher to kill it.
    std::chrono::milliseconds first_contact{10000};
  };
  using OnLost = std::function<void(const TaskId& task, const std::string& message)>;
  Watchdog(const ClusterSpec& spec, std::vector<TaskId> tasks, Options options, OnLost on_lost);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop(ClusterSpec spec, std::vector<TaskId> tasks, Options options, OnLost on_lost);
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// Asks every task but the chief to shut down, best effort: a task that does not answer (lost, or
// restarted and not serving yet) is asked again every 0.1 s until `timeout_s` has passed in all;
// tasks gone for good are then given up.
void shutdown_tasks(const ClusterSpec& spec, const std::string& reason, double timeout_s = 3.0);

}  // namespace dtensor::ps

namespace dtensor::ps {

// Serves `services` (and Control) as spec.task() and watches the chief and every parameter
// server but itself. Returns the chief's reason when it shuts the task down; throws
// CommunicationError "[<task>] lost task ..." when a watched task is lost. `port_out`, if set,
// gets the port.
std::string serve_task(const ClusterSpec& spec, std::vector<grpc::Service*> services,
                       Watchdog::Options options, int* port_out = nullptr);

}  // namespace dtensor::ps
