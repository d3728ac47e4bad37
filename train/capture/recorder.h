// Recorder: the TraceHook a Function installs while it traces a step. Every call the eager code
// hands it runs at once (recording paused, so nested work is not recorded twice) and is appended
// to a Program; its inputs are resolved to slots by what they hold (the storage and shape of
// every shard), so copies and re-wrapped handles of one value meet the same slot.
//
// A value no call produced is a constant of the program when it existed before the trace (a
// DTensor the step reads from its closure; immutable). One created during the trace by code that
// did not go through the recorder would replay stale: the recorder rejects it, naming the call
// that read it.
//
// Elementwise run_local calls are also recorded in structured form (elementwise.h), from the
// notes the CPU kernels make while the recorder is installed, for the fused replay (segment.h).
//
// Ownership: the recorder owns the program under construction until take_program(). It keeps
// every traced value alive until then, so that no storage is reused (and misread as another
// value) during the trace. Thread-safety: installed on one thread; not shared.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "train/capture/program.h"

namespace dtensor::capture {

class Recorder final : public TraceHook {
 public:
  // `arguments` become slots 0..n-1.
  explicit Recorder(const std::vector<DTensor>& arguments);
  ~Recorder() override;

  // Installs this recorder on the calling thread until stop() (or destruction).
  void start();
  void stop();

  DTensor call(const char* op, const Inputs& inputs, ValueFn run) override;
  void effect(const char* op, const Inputs& inputs, EffectFn run) override;
  std::vector<Tensor> shard_call(const char* op, const std::vector<Tensor>& shards,
                                 ShardFn run) override;

  // Finishes the program with the step's `outputs` and hands it over.
  std::unique_ptr<Program> take_program(const std::vector<DTensor>& outputs);

 private:
  using Key = std::vector<int64_t>;
  static Key key_of(const std::vector<Tensor>& shards);
  int slot_of(const DTensor& x, const char* op);
  int slot_of_shards(const std::vector<Tensor>& shards);
  void resolve(const Inputs& inputs, const char* op, Program::Call& call);
  int add_result(Program::Slot slot, const std::vector<Tensor>& shards);

  // Pauses recording for the lifetime of a call's eager run.
  class Pause;

  std::unique_ptr<Program> program_;
  std::map<Key, int> slots_;
  int64_t first_traced_id_;  // DTensors with ids from here on were made during the trace
  int num_arguments_;
  bool installed_ = false;
  std::vector<ElementwiseNote> notes_;  // registered with ElementwiseNotes while installed
  CaptureHook* previous_ = nullptr;
};

}  // namespace dtensor::capture
