// CaptureHook: the seam through which a step recorder (dtensor/capture) sees what a traced step
// executes. Code that does work worth replaying (collectives here; run_local, relayout, variable
// updates above) asks `CaptureHook::active()` first: null, the eager path, costs one thread-local
// load. While a recorder traces on this thread, the call is handed to it instead: the recorder
// runs it at once with itself paused (so nested calls are not recorded twice) and keeps the
// closure, which must own everything it uses, to replay later.
//
// Ownership: the recorder that installs itself owns its state; hooks only borrow it for the call.
// Thread-safety: the active recorder is per thread; work a call hands to pool threads is not seen.
#pragma once

#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace dtensor {

class CaptureHook {
 public:
  using ShardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& shards)>;

  // The recorder tracing on this thread, or null.
  static CaptureHook* active() { return active_; }

  // Runs `run(shards)` now, recording paused, and records it as one step of the program that
  // maps the value `shards` to the returned one. `op` names the call in errors.
  virtual std::vector<Tensor> shard_call(const char* op, const std::vector<Tensor>& shards,
                                         ShardFn run) = 0;

 protected:
  CaptureHook() = default;
  virtual ~CaptureHook() = default;
  CaptureHook(const CaptureHook&) = delete;
  CaptureHook& operator=(const CaptureHook&) = delete;
  // Installs `hook` on this thread (null: none) and returns the previous one.
  static CaptureHook* exchange_active(CaptureHook* hook) {
    CaptureHook* previous = active_;
    active_ = hook;
    return previous;
  }

 private:
  static inline thread_local CaptureHook* active_ = nullptr;
};

}  // namespace dtensor
