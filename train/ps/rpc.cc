#include "train/ps/rpc.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace dtensor::ps {

std::shared_ptr<grpc::Channel> make_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Reconnect quickly to a restarted task instead of backing off for up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<grpc::ClientContext> with_deadline(double seconds) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
  return context;
}

std::string status_text(const grpc::Status& status) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int code = static_cast<int>(status.error_code());
  const char* name = code >= 0 && code <= 16 ? kNames[code] : "?";
  return fmt::format("{}: {}", name, status.error_message());
}

bool is_lost(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         status.error_code() == grpc::StatusCode::CANCELLED;
}

void check_status(const char* fn, const grpc::Status& status, const TaskId& task,
                  const std::string& address) {
  if (status.ok()) return;
  if (is_lost(status)) {
    throw_error<CommunicationError>(fn, "lost task {} at {}: {}", task.str(), address,
                                    status_text(status));
  }
  throw_error<InvalidArgumentError>(fn, "{} at {} refused: {}", task.str(), address,
                                    status_text(status));
}

class TaskServer::ControlService final : public rpc::Control::Service {
 public:
  ControlService(std::string task, TaskServer& server) : task_(std::move(task)), server_(server) {}
  grpc::Status Ping(grpc::ServerContext*, const rpc::PingRequest*, rpc::PingReply* reply) override {
    reply->set_task(task_);
    return grpc::Status::OK;
  }
  grpc::Status Shutdown(grpc::ServerContext*, const rpc::ShutdownRequest* request,
                        rpc::ShutdownReply*) override {
    server_.stop(request->reason());
    return grpc::Status::OK;
  }

 private:
  std::string task_;
  TaskServer& server_;
};

TaskServer::TaskServer(std::string task, const std::string& address,
                       std::vector<grpc::Service*> services)
    : control_(std::make_unique<ControlService>(task, *this)) {
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second job's task could then bind this port too, and the
  // kernel would hand it some of this job's connections (pulls and pushes crossing jobs). Off,
  // a taken port fails here instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(control_.get());
  for (grpc::Service* s : services) builder.RegisterService(s);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    throw_error<CommunicationError>("TaskServer", "cannot listen on {} ({})", address, task);
  }
}

TaskServer::~TaskServer() {
  // In-flight calls get a second to finish, then are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

std::optional<std::string> TaskServer::wait_for_shutdown(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return reason_.has_value(); });
  return reason_;
}

void TaskServer::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!reason_) reason_ = reason;
  }
  cv_.notify_all();
}

Watchdog::Watchdog(const ClusterSpec& spec, std::vector<TaskId> tasks, Options options,
                   OnLost on_lost)
    : thread_(&Watchdog::loop, this, spec, std::move(tasks), options, std::move(on_lost)) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::loop(ClusterSpec spec, std::vector<TaskId> tasks, Options options, OnLost on_lost) {
  using Clock = std::chrono::steady_clock;
  struct Watched {
    TaskId id;
    std::string address;
    std::unique_ptr<rpc::Control::Stub> stub;
    Clock::time_point last_answer;
    bool heard = false;
    std::string last_error = "no answer yet";
  };
  std::vector<Watched> watched;
  const Clock::time_point start = Clock::now();
  for (const TaskId& t : tasks) {
    const std::string& address = spec.address(t);
    watched.push_back({t, address, rpc::Control::NewStub(make_channel(address)), start});
  }
  const double ping_timeout_s = std::chrono::duration<double>(options.interval).count() * 2;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, options.interval, [&] { return stopping_; })) return;
    }
    for (Watched& w : watched) {
      rpc::PingRequest request;
      rpc::PingReply reply;
      const grpc::Status status =
          w.stub->Ping(with_deadline(ping_timeout_s).get(), request, &reply);
      const Clock::time_point now = Clock::now();
      if (status.ok()) {
        w.last_answer = now;
        w.heard = true;
        continue;
      }
      w.last_error = status_text(status);
      const auto silent = now - w.last_answer;
      if (silent > (w.heard ? options.lost_after : options.first_contact)) {
        const double seconds = std::chrono::duration<double>(silent).count();
        on_lost(w.id, fmt::format("lost task {} at {}: no answer for {:.1f} s (last: {})",
                                  w.id.str(), w.address, seconds, w.last_error));
        return;
      }
    }
  }
}

void shutdown_tasks(const ClusterSpec& spec, const std::string& reason, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  std::vector<TaskId> left;
  for (int64_t i = 0; i < spec.num_workers(); ++i) left.push_back({TaskType::kWorker, i});
  for (int64_t i = 0; i < spec.num_ps(); ++i) left.push_back({TaskType::kPs, i});
  std::vector<std::unique_ptr<rpc::Control::Stub>> stubs;
  for (const TaskId& t : left)
    stubs.push_back(rpc::Control::NewStub(make_channel(spec.address(t))));
  // Tasks that do not answer (lost, or restarting and not serving yet) are asked again until
  // `timeout_s` has passed, so a worker restarted just before the end still hears the reason.
  const Clock::time_point end =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
  std::vector<bool> told(left.size(), false);
  for (;;) {
    bool all_told = true;
    for (size_t i = 0; i < left.size(); ++i) {
      if (told[i]) continue;
      const double budget = std::chrono::duration<double>(end - Clock::now()).count();
      rpc::ShutdownRequest request;
      request.set_reason(reason);
      rpc::ShutdownReply reply;
      told[i] = stubs[i]
                    ->Shutdown(with_deadline(std::max(0.05, std::min(budget, 1.0))).get(), request,
                               &reply)
                    .ok();
      all_told = all_told && told[i];
    }
    if (all_told || Clock::now() >= end) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace dtensor::ps

namespace dtensor::ps {

std::string serve_task(const ClusterSpec& spec, std::vector<grpc::Service*> services,
                       Watchdog::Options options, int* port_out) {
  const std::string me = spec.task().str();
  TaskServer server(me, spec.address(spec.task()), std::move(services));
  if (port_out != nullptr) *port_out = server.port();
  std::vector<TaskId> watched;
  if (spec.task().type != TaskType::kChief) watched.push_back({TaskType::kChief, 0});
  for (int64_t i = 0; i < spec.num_ps(); ++i) {
    if (!(spec.task() == TaskId{TaskType::kPs, i})) watched.push_back({TaskType::kPs, i});
  }
  std::mutex mu;
  std::optional<std::string> lost;
  Watchdog watchdog(spec, watched, options, [&](const TaskId&, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      lost = message;
    }
    server.stop("");
  });
  std::optional<std::string> reason;
  while (!(reason = server.wait_for_shutdown(std::chrono::milliseconds(1000)))) {
  }
  std::lock_guard<std::mutex> lock(mu);
  if (lost) throw_error<CommunicationError>(me, "{}", *lost);
  return *reason;
}

}  // namespace dtensor::ps
