#include "train/parallel/prefetch.h"

#include <optional>

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "fmt/format.h"
#include "ops/autograd.h"
#include "runtime/error.h"

namespace dtensor::parallel {

// ---- Timeline --------------------------------------------------------------------------------

void Timeline::enable() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = true;
}

void Timeline::disable() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
}

bool Timeline::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void Timeline::open(const std::string& name, const std::string& lane) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  const double t = now_us();
  spans_.push_back({name, lane, t, t});
  open_.push_back(true);
}

void Timeline::close(const std::string& name, const std::string& lane) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  for (size_t i = spans_.size(); i-- > 0;) {
    if (open_[i] && spans_[i].name == name && spans_[i].lane == lane) {
      spans_[i].end_us = now_us();
      open_[i] = false;
      return;
    }
  }
}

std::vector<Timeline::Span> Timeline::spans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spans_;
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  spans_.clear();
  open_.clear();
  origin_ = std::chrono::steady_clock::now();
}

std::string Timeline::chrome_trace_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lanes;
  std::string events;
  auto lane_id = [&lanes](const std::string& lane) {
    for (size_t i = 0; i < lanes.size(); ++i) {
      if (lanes[i] == lane) return i;
    }
    lanes.push_back(lane);
    return lanes.size() - 1;
  };
  for (const Span& s : spans_) {
    events += fmt::format(
        "{}{{\"name\": \"{}\", \"ph\": \"X\", \"pid\": 1, \"tid\": {}, \"ts\": {:.1f}, \"dur\": "
        "{:.1f}}}",
        events.empty() ? "" : ",\n  ", s.name, lane_id(s.lane), s.begin_us, s.end_us - s.begin_us);
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    events += fmt::format(
        "{}{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": {}, \"args\": "
        "{{\"name\": \"{}\"}}}}",
        events.empty() ? "" : ",\n  ", i, lanes[i]);
  }
  return "{\"traceEvents\": [\n  " + events + "\n]}\n";
}

// ---- GatherThread ----------------------------------------------------------------------------

GatherThread::GatherThread(const Mesh& mesh)
    : inline_(mesh.num_local_devices() != mesh.num_devices()) {
  if (!inline_) thread_ = std::thread([this] { loop(); });
}

GatherThread::~GatherThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_future<std::vector<DTensor>> GatherThread::post(Job job) {
  std::packaged_task<std::vector<DTensor>()> task(std::move(job));
  std::shared_future<std::vector<DTensor>> result = task.get_future().share();
  if (inline_) {
    task();
    return result;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return result;
}

// Idle until a job comes or the owner stops it; the destructor ends the wait.
void GatherThread::loop() {
  for (;;) {
    std::packaged_task<std::vector<DTensor>()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // an exception is stored in the future
  }
}

// ---- GatherFlight ----------------------------------------------------------------------------

struct GatherFlight::State {
  std::string name;
  std::vector<Layout> compute, back;
  std::vector<std::optional<DTensor>> stored;  // until taken: the tape's and the trace's inputs
  std::shared_future<std::vector<DTensor>> future;
  std::vector<std::optional<DTensor>> results;
  bool waited = false;

  // Starts the job on `thread` (here and on every replay).
  void launch(GatherThread& thread, std::vector<DTensor> stored, GatherWatch watch) {
    results.assign(compute.size(), std::nullopt);
    waited = false;
    future = thread.post([stored = std::move(stored), compute = compute, name = name, watch] {
      if (watch.timeline != nullptr) watch.timeline->open(name, "gather");
      std::vector<DTensor> out;
      for (size_t k = 0; k < stored.size(); ++k) {
        out.push_back(stored[k].layout() == compute[k] ? stored[k]
                                                       : relayout(stored[k], compute[k]));
        if (watch.meter != nullptr && !(out[k].layout() == stored[k].layout())) {
          watch.meter->gathered(out[k]);
        }
      }
      if (watch.timeline != nullptr) watch.timeline->close(name, "gather");
      return out;
    });
  }

  DTensor take(size_t k) {
    if (!waited) {
      if (future.wait_for(kGatherTimeout) != std::future_status::ready) {
        throw_error<CommunicationError>("GatherFlight::take", "{} did not finish in {} s", name,
                                        kGatherTimeout.count());
      }
      std::vector<DTensor> all = future.get();
      for (size_t i = 0; i < all.size(); ++i) results[i] = std::move(all[i]);
      future = {};
      waited = true;
    }
    DTensor out = std::move(*results[k]);
    results[k].reset();
    return out;
  }
};

GatherFlight start_gathers(GatherThread& thread, const std::vector<DTensor>& stored,
                           const std::vector<Layout>& compute, const std::string& name,
                           GatherWatch watch) {
  if (stored.size() != compute.size()) {
    throw_error<InvalidArgumentError>("start_gathers", "{}: {} stored values and {} layouts", name,
                                      stored.size(), compute.size());
  }
  GatherFlight flight;
  auto state = std::make_shared<GatherFlight::State>();
  state->name = name;
  state->compute = compute;
  for (const DTensor& s : stored) state->back.push_back(s.layout().without_partial());
  flight.state_ = state;
  GatherThread* on = &thread;
  state->stored.assign(stored.begin(), stored.end());
  if (StepObserver* hook = StepObserver::active()) {
    StepObserver::Inputs inputs;
    for (const DTensor& s : stored) inputs.push_back(&s);
    // The meter counts eager steps only: in replays its handles would keep copies alive longer.
    const GatherWatch replayed{watch.timeline, nullptr};
    hook->effect("fsdp_gather_start", inputs,
                 [state, on, replayed](const StepObserver::Inputs& in) {
                   std::vector<DTensor> values;
                   for (const DTensor* x : in) values.push_back(*x);
                   state->launch(*on, std::move(values), replayed);
                 });
  } else {
    state->launch(thread, stored, watch);
  }
  return flight;
}

DTensor GatherFlight::take(size_t k) {
  if (state_ == nullptr) {
    throw_error<InvalidArgumentError>("GatherFlight::take", "value {} of a flight not started", k);
  }
  if (k >= state_->compute.size()) {
    throw_error<InvalidArgumentError>("GatherFlight::take", "value {} of {}: it has {}", k,
                                      state_->name, state_->compute.size());
  }
  std::shared_ptr<State> state = state_;
  if (!state->stored[k]) {
    throw_error<InvalidArgumentError>("GatherFlight::take", "value {} of {} was taken before", k,
                                      state->name);
  }
  const DTensor stored = std::move(*state->stored[k]);
  state->stored[k].reset();
  StepObserver* hook = StepObserver::active();
  DTensor out =
      hook == nullptr
          ? state->take(k)
          : hook->call("fsdp_gather_take", {&stored},
                       [state, k](const StepObserver::Inputs&) { return state->take(k); });
  // The relayout's VJP, as the tape records a relayout made on this thread.
  if (tape_active()) {
    record_op({&stored}, out, [back = state->back[k]](const DTensor& g) {
      return std::vector<std::optional<DTensor>>{relayout(g, back)};
    });
  }
  return out;
}

void mark_compute(Timeline& timeline, const std::string& name, bool open) {
  auto mark = [&timeline, name, open](const StepObserver::Inputs&) {
    open ? timeline.open(name, "compute") : timeline.close(name, "compute");
  };
  if (StepObserver* hook = StepObserver::active()) {
    hook->effect("timeline_mark", {}, mark);
  } else {
    mark({});
  }
}

}  // namespace dtensor::parallel
