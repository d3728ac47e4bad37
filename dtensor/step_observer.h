// StepObserver: the one seam through which what a step executes is seen from above. Two kinds of
// observer register here, on the thread whose work they watch:
//
// - a step recorder (train/capture/recorder.h) takes the work itself: collectives, run_local
//   (ops/expand.h), relayout, variable reads and updates, Optimizer::apply ask `active()` first
//   and, while it is non-null, hand their work to it through `shard_call`, `call` or `effect`.
//   The recorder runs it at once with itself paused (Pause: nested calls are not recorded twice)
//   and keeps the closure, which must own everything it uses, to replay later. Operations whose
//   result a trace could not replay faithfully (host reads of tensor values, random values from a
//   host seed) call `reject_in_trace`.
// - the gradient tape (ops/autograd.h) only listens: every relayout that changes the layout is
//   reported to each observer on the thread (`notify_relayout`), paused or not, so that a move is
//   differentiable inside and outside captured steps.
//
// One registration point, install()/uninstall(); one accessor, active(). Eager code with no
// observer pays one thread-local load per call site.
//
// Ownership: an observer is owned by whoever installs it and must be uninstalled before it dies;
// the seam only borrows it. Thread-safety: every observer list and the active taker are per
// thread; work a call hands to pool threads is not seen. Nothing here is shared between threads.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace dtensor {

class DTensor;

class StepObserver {
 public:
  using ShardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& shards)>;
  using Inputs = std::vector<const DTensor*>;
  using ValueFn = std::function<DTensor(const Inputs& inputs)>;
  using EffectFn = std::function<void(const Inputs& inputs)>;

  // What an observer wants: the work itself (a recorder) or only to hear of relayouts (a tape).
  enum class Role { kTakesWork, kListens };

  // The observer that takes this thread's work (the innermost installed one with
  // Role::kTakesWork, unless paused), or null: the eager path.
  static StepObserver* active() { return active_; }

  // Registers `observer` on the calling thread until uninstall(observer). Observers may be
  // uninstalled in any order.
  static void install(StepObserver* observer) {
    observers_.push_back(observer);
    if (observer->role_ == Role::kTakesWork) active_ = observer;
  }
  static void uninstall(StepObserver* observer) {
    auto it = std::find(observers_.begin(), observers_.end(), observer);
    if (it == observers_.end()) return;
    observers_.erase(it);
    if (active_ == observer) active_ = innermost_taker();
  }

  // Tells every observer on this thread that `output` is `input` relayouted to another layout.
  static void notify_relayout(const DTensor& input, const DTensor& output) {
    if (observers_.empty()) return;
    // A copy: a listener may install or uninstall observers while it runs.
    const std::vector<StepObserver*> observers = observers_;
    for (StepObserver* o : observers) o->relayouted(input, output);
  }

  // For an observer taking work (a listener is never handed any: it overrides these to throw).
  // Runs `run(shards)` now, recording paused, and records it as one step of the program that
  // maps the value `shards` to the returned one. `op` names the call in errors.
  virtual std::vector<Tensor> shard_call(const char* op, const std::vector<Tensor>& shards,
                                         ShardFn run) = 0;
  // Runs `run(inputs)` now, recording paused, and records it as one step of the program: on
  // replay it runs again on the values the inputs have then. `run` must own what it uses.
  virtual DTensor call(const char* op, const Inputs& inputs, ValueFn run) = 0;
  // As call, for a step whose only result is a side effect (a variable or optimizer update).
  virtual void effect(const char* op, const Inputs& inputs, EffectFn run) = 0;

  // For a listener: `output` is `input` relayouted (reported for every layout-changing relayout
  // on this thread).
  virtual void relayouted(const DTensor& input, const DTensor& output) {
    (void)input;
    (void)output;
  }

 protected:
  explicit StepObserver(Role role) : role_(role) {}
  virtual ~StepObserver() = default;
  StepObserver(const StepObserver&) = delete;
  StepObserver& operator=(const StepObserver&) = delete;

  // While it lives, no observer takes this thread's work (active() is null); listeners still
  // hear of relayouts.
  class Pause {
   public:
    Pause() : previous_(active_) { active_ = nullptr; }
    ~Pause() { active_ = previous_; }
    Pause(const Pause&) = delete;
    Pause& operator=(const Pause&) = delete;

   private:
    StepObserver* previous_;
  };

 private:
  static StepObserver* innermost_taker() {
    for (auto it = observers_.rbegin(); it != observers_.rend(); ++it) {
      if ((*it)->role_ == Role::kTakesWork) return *it;
    }
    return nullptr;
  }

  const Role role_;
  static inline thread_local StepObserver* active_ = nullptr;
  static inline thread_local std::vector<StepObserver*> observers_;
};

// Throws UnimplementedError "[op] cannot run inside a captured step: <reason>" when a recorder
// traces on this thread (the result would be frozen into the trace); does nothing otherwise.
inline void reject_in_trace(const char* op, const char* reason) {
  if (StepObserver::active() != nullptr) {
    throw_error<UnimplementedError>(op, "cannot run inside a captured step: {}", reason);
  }
}

}  // namespace dtensor
