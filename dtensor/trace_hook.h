// TraceHook: the DTensor-level half of the capture seam (runtime/capture_hook.h). While a step
// recorder (train/capture/function.h) traces on this thread, run_local (ops/expand.h),
// relayout, variable reads and updates and Optimizer::apply hand their work to it through
// `call` and `effect`; operations whose result the trace could not replay faithfully (host reads
// of tensor values, random values from a host seed) call `reject_in_trace`.
//
// The only CaptureHook ever installed is the capture recorder, which is a TraceHook: active()
// downcasts without a check, so the eager path stays one thread-local load.
//
// Thread-safety: per thread, like CaptureHook.
#pragma once

#include <functional>
#include <vector>

#include "runtime/capture_hook.h"
#include "runtime/error.h"

namespace dtensor {

class DTensor;

class TraceHook : public CaptureHook {
 public:
  using Inputs = std::vector<const DTensor*>;
  using ValueFn = std::function<DTensor(const Inputs& inputs)>;
  using EffectFn = std::function<void(const Inputs& inputs)>;

  static TraceHook* active() { return static_cast<TraceHook*>(CaptureHook::active()); }

  // Runs `run(inputs)` now, recording paused, and records it as one step of the program: on
  // replay it runs again on the values the inputs have then. `run` must own what it uses.
  virtual DTensor call(const char* op, const Inputs& inputs, ValueFn run) = 0;
  // As call, for a step whose only result is a side effect (a variable or optimizer update).
  virtual void effect(const char* op, const Inputs& inputs, EffectFn run) = 0;
};

// Throws UnimplementedError "[op] cannot run inside a captured step: <reason>" when a recorder
// traces on this thread (the result would be frozen into the trace); does nothing otherwise.
inline void reject_in_trace(const char* op, const char* reason) {
  if (CaptureHook::active() != nullptr) {
    throw_error<UnimplementedError>(op, "cannot run inside a captured step: {}", reason);
  }
}

}  // namespace dtensor
