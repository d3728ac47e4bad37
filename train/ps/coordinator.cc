#include "train/ps/coordinator.h"

#include <fmt/format.h>

#include <cstdio>

#include "runtime/error.h"

namespace dtensor::ps {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{200};

}  // namespace

struct RemoteValue::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::string result;
  std::optional<std::string> error;
  bool lost_ps = false;  // the error is a lost parameter server
  int64_t worker = -1;
  const ParameterServerStrategy* strategy = nullptr;
};

struct ClusterCoordinator::Closure {
  int64_t step_id;
  std::string function, args;
  std::shared_ptr<RemoteValue::State> value;
};

bool RemoteValue::is_ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->ready;
}

int64_t RemoteValue::worker() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->worker;
}

std::string RemoteValue::fetch(std::chrono::milliseconds timeout) const {
  constexpr const char* kFn = "RemoteValue::fetch";
  const Clock::time_point end = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(state_->mu);
  while (!state_->ready) {
    if (std::optional<std::string> lost = state_->strategy->lost_task()) {
      throw_error<CommunicationError>(kFn, "{}", *lost);
    }
    if (Clock::now() >= end) {
      throw_error<CommunicationError>(kFn, "no result after {} ms", timeout.count());
    }
    state_->cv.wait_for(lock, kPoll);
  }
  if (state_->error) {
    if (state_->lost_ps) throw_error<CommunicationError>(kFn, "{}", *state_->error);
    throw_error<InvalidArgumentError>(kFn, "{}", *state_->error);
  }
  return state_->result;
}

ClusterCoordinator::ClusterCoordinator(const ParameterServerStrategy& strategy)
    : ClusterCoordinator(strategy, Options{}) {}

ClusterCoordinator::ClusterCoordinator(const ParameterServerStrategy& strategy, Options options)
    : strategy_(strategy),
      options_(options),
      alive_(static_cast<size_t>(strategy.num_workers()), false),
      last_alive_(Clock::now()) {
  for (int64_t w = 0; w < strategy.num_workers(); ++w) {
    threads_.emplace_back(&ClusterCoordinator::dispatch, this, w);
  }
}

ClusterCoordinator::~ClusterCoordinator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

RemoteValue ClusterCoordinator::schedule(const std::string& function, std::string args) {
  RemoteValue value;
  value.state_ = std::make_shared<RemoteValue::State>();
  value.state_->strategy = &strategy_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::make_shared<Closure>(
        Closure{strategy_.next_step_id(), function, std::move(args), value.state_}));
  }
  cv_.notify_all();
  return value;
}

void ClusterCoordinator::throw_if_failed(const char* fn) {
  if (std::optional<std::string> lost = strategy_.lost_task()) {
    throw_error<CommunicationError>(fn, "{}", *lost);
  }
  if (first_error_) {
    if (first_error_lost_ps_) throw_error<CommunicationError>(fn, "{}", *first_error_);
    throw_error<InvalidArgumentError>(fn, "{}", *first_error_);
  }
}

void ClusterCoordinator::join() {
  constexpr const char* kFn = "ClusterCoordinator::join";
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    throw_if_failed(kFn);
    if (queue_.empty() && in_flight_ == 0) return;
    const bool any_alive = std::find(alive_.begin(), alive_.end(), true) != alive_.end();
    if (!any_alive && Clock::now() - last_alive_ > options_.no_worker_timeout) {
      throw_error<CommunicationError>(kFn, "no worker has answered for {} ms; {} functions wait",
                                      options_.no_worker_timeout.count(), queue_.size());
    }
    cv_.wait_for(lock, kPoll);
  }
}

bool ClusterCoordinator::done() {
  std::lock_guard<std::mutex> lock(mu_);
  throw_if_failed("ClusterCoordinator::done");
  return queue_.empty() && in_flight_ == 0;
}

PerWorkerDataset ClusterCoordinator::create_per_worker_dataset(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::find(datasets_.begin(), datasets_.end(), name) == datasets_.end()) {
      datasets_.push_back(name);
      ++generation_;
    }
  }
  cv_.notify_all();
  return {name};
}

CoordinatorStats ClusterCoordinator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t ClusterCoordinator::live_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::count(alive_.begin(), alive_.end(), true);
}

bool ClusterCoordinator::wait_for(std::unique_lock<std::mutex>& lock,
                                  std::chrono::milliseconds timeout) {
  return cv_.wait_for(lock, timeout, [&] { return stopping_; });
}

void ClusterCoordinator::dispatch(int64_t worker) {
  const TaskId task{TaskType::kWorker, worker};
  const std::string address = strategy_.cluster().address(task);
  auto stub = rpc::Worker::NewStub(make_channel(address));
  int64_t configured = -1;
  // Records whether the worker answered; logs changes.
  auto set_alive = [&](bool alive, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t w = static_cast<size_t>(worker);
    if (alive) last_alive_ = Clock::now();
    if (alive_[w] == alive) return;
    alive_[w] = alive;
    alive ? ++stats_.workers_joined : ++stats_.workers_lost;
    if (options_.log) {
      std::fprintf(stderr, "[ClusterCoordinator] %s at %s %s\n", task.str().c_str(),
                   address.c_str(), alive ? "joined" : ("lost: " + why).c_str());
    }
  };
  for (;;) {
    int64_t generation;
    rpc::ConfigureRequest config;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
      generation = generation_;
      for (const std::string& d : datasets_) config.add_datasets(d);
    }
    if (configured != generation) {
      for (const ShardedVariable& v : strategy_.sharded_variables()) {
        rpc::VariableSpec* spec = config.add_variables();
        spec->set_name(v.name);
        for (int64_t d : v.shape) spec->add_shape(d);
        for (const rpc::ShardPlacement& at : v.shards) *spec->add_shards() = at;
      }
      for (const std::string& a : strategy_.cluster().parameter_servers()) {
        config.add_ps_addresses(a);
      }
      config.set_generation(generation);
      config.set_worker_index(worker);
      config.set_num_workers(strategy_.num_workers());
      rpc::ConfigureReply reply;
      const grpc::Status status =
          stub->Configure(with_deadline(options_.configure_timeout_s).get(), config, &reply);
      if (!status.ok()) {
        set_alive(false, status_text(status));
        std::unique_lock<std::mutex> lock(mu_);
        if (!is_lost(status) && !first_error_) {
          first_error_ = fmt::format("cannot configure {}: {}", task.str(), status_text(status));
        }
        if (wait_for(lock, std::chrono::milliseconds(500))) return;
        continue;
      }
      configured = generation;
      set_alive(true, "");
    }
    std::shared_ptr<Closure> closure;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kPoll,
                   [&] { return stopping_ || !queue_.empty() || generation_ != configured; });
      if (stopping_) return;
      if (queue_.empty() || generation_ != configured) continue;
      closure = queue_.front();
      queue_.pop_front();
      ++in_flight_;
    }
    rpc::RunRequest request;
    request.set_function(closure->function);
    request.set_args(closure->args);
    request.set_generation(configured);
    request.set_step_id(closure->step_id);
    rpc::RunReply reply;
    const grpc::Status status =
        stub->Run(with_deadline(options_.run_timeout_s).get(), request, &reply);
    const bool give_back =
        is_lost(status) || status.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    if (give_back) {
      configured = -1;
      if (is_lost(status)) set_alive(false, status_text(status));
    } else {
      set_alive(true, "");
      RemoteValue::State& value = *closure->value;
      std::lock_guard<std::mutex> lock(value.mu);
      value.ready = true;
      value.worker = worker;
      if (status.ok()) {
        value.result = reply.result();
      } else {
        value.error = fmt::format("function '{}' failed on {}: {}", closure->function, task.str(),
                                  status.error_message());
        value.lost_ps = status.error_code() == grpc::StatusCode::ABORTED;
      }
      value.cv.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      if (give_back) {
        queue_.push_front(closure);
        ++stats_.reruns;
      } else if (status.ok()) {
        ++stats_.functions_done;
        stats_.rpc_seconds += reply.rpc_seconds();
        stats_.compute_seconds += reply.compute_seconds();
        stats_.duplicate_pushes += reply.duplicate_pushes();
      } else if (!first_error_) {
        first_error_ = *closure->value->error;
        first_error_lost_ps_ = closure->value->lost_ps;
      }
    }
    cv_.notify_all();
  }
}

}  // namespace dtensor::ps
