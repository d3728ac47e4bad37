// Function: a captured training step, the counterpart of tf.function.
//
//   dtensor::Function step = dtensor::function([&](const std::vector<DTensor>& args) {
//     GradientTape tape;
//     for (const DVariable& v : vars) tape.watch(v);
//     DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(args[0]), args[1]));
//     optimizer.apply(vars, tape.gradient(loss, vars));
//     return std::vector<DTensor>{loss};
//   });
//   for (...) DTensor loss = step({images, labels})[0];
//
// The first call with a given signature traces: the step runs eagerly once while a recorder
// (capture/recorder.h) keeps what actually executes: every local kernel expansion with its
// kernel and decisions, every relayout with its plan, every collective, variable reads and
// updates, optimizer applies, constants. Later calls with the same signature replay that program
// (capture/program.h): no validation, sharding rules, layout planning, tape or op dispatch; the
// very same kernels and collectives on the new values, so a replay gives eager's bits.
//
// The signature is the shape, dtype and layout (with its mesh) of every argument. Inside the step
// every argument is a value of its own, as tf.function's placeholders are: a DTensor passed twice,
// or one that the step also reads from its closure or as a variable's value(), is traced as two
// values, and a replay with different values for them computes with each (a gradient tape that
// watches one argument does not watch its aliases). Everything else the step uses is fixed by the
// trace, as Python values are by tf.function:
//  - C++ values (sizes, scalars like a scale factor, flags, control flow) are frozen as traced;
//    a step whose host logic would take another path must be a different Function;
//  - DTensors the step reads from its closure are constants (they are immutable); values that
//    change between calls must be arguments or DVariables;
//  - DVariables are read and updated at replay time; an Optimizer's step count and learning
//    rate schedule advance on every replay. Variables (and optimizer slots) created while tracing
//    belong to the trace and persist, like tf.function's first-call variables; a step that makes
//    a new variable on every call cannot be captured.
// What the trace cannot replay faithfully raises UnimplementedError naming the op, and the call
// caches nothing: reading values on the host (unpack, to_global), bringing host data in (pack,
// distribute), random ops with a host seed (random_uniform, dropout(x, rate, uint64_t)), saving
// or restoring a checkpoint, and a value computed by a path the recorder does not see. Dropout
// takes its seed as a DTensor instead, an argument or SeedGenerator::next() (ops/ops.h): a fresh
// mask every replay, with eager's bits. A data-dependent layout choice (a partial sum through
// mul/div) is re-checked on replay and raises if the values now call for the other choice.
//
// Ownership: the function owns the step closure and the cached programs; the variables and
// optimizers the step uses must outlive it. Thread-safety: calls are serialised by a mutex; a
// step must not call its own Function.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "train/capture/collective_summary.h"
#include "train/capture/program.h"

namespace dtensor {

using Step = std::function<std::vector<DTensor>(const std::vector<DTensor>& arguments)>;

struct FunctionOptions {
  // Programs kept, one per signature; the least recently used goes first.
  size_t max_signatures = 8;
  // Run the step eagerly every time (tf.config.run_functions_eagerly): for debugging and --eager.
  bool eager = false;
};

class Function {
 public:
  explicit Function(Step step, FunctionOptions options = {});
  Function(Function&&) noexcept;
  Function& operator=(Function&&) noexcept;
  ~Function();

  // Traces on a new signature, replays otherwise. Inside another function's trace the step just
  // runs (it becomes part of the outer trace).
  std::vector<DTensor> operator()(const std::vector<DTensor>& arguments);

  // Traces so far (first calls of a signature, and retraces after eviction) and replays.
  int64_t trace_count() const;
  int64_t replay_count() const;
  // The ops of the cached program for `arguments`' signature ("" if none), for tests and tools.
  std::string program_string(const std::vector<DTensor>& arguments) const;
  // How many of that program's calls replay inside fused elementwise segments (0 if none).
  size_t fused_calls(const std::vector<DTensor>& arguments) const;
  // How many values those segments write out (the others live in blocks only; 0 if none).
  size_t fused_results(const std::vector<DTensor>& arguments) const;
  // The collectives that program runs on every replay, as its trace ran them (empty if none).
  CollectiveSummary collective_summary(const std::vector<DTensor>& arguments) const;

 private:
  struct Entry {
    std::vector<capture::ValueMeta> signature;
    std::unique_ptr<capture::Program> program;
    std::vector<CollectiveRecord> collectives;  // heard while tracing
  };
  struct State {
    Step step;
    FunctionOptions options;
    mutable std::mutex mu;
    std::list<Entry> cache;  // most recently used first
    int64_t traces = 0;
    int64_t replays = 0;
  };
  static bool matches(const Entry& entry, const std::vector<DTensor>& arguments);
  // `count` of the cached program for `arguments`' signature, 0 if none.
  size_t program_count(const std::vector<DTensor>& arguments,
                       size_t (capture::Program::*count)() const) const;
  std::vector<DTensor> trace(const std::vector<DTensor>& arguments);

  std::unique_ptr<State> state_;
};

// The captured form of `step` (tf.function).
Function function(Step step, FunctionOptions options = {});

}  // namespace dtensor
