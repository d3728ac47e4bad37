// Program: a captured step, a straight-line list of calls over value slots.
//
// Each call is one closure the eager code handed to the recorder (dtensor/step_observer.h): a local
// kernel expansion (run_local with its kernel, stacking and work estimate), a relayout with its
// plan, a collective, a variable read or update, an optimizer apply, a constant made again. Slots
// hold the values between calls: the step's arguments, the results of calls, and constants the
// step read from outside (DTensors are immutable, so reading them again gives the same bits).
// A slot is dropped after its last reader, so a replay holds no more than eager code would.
//
// Ownership: the program owns its closures, constants and, during a replay, the slot values.
// Thread-safety: replay() mutates the slots; one replay at a time (Function serialises them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/step_observer.h"
#include "train/capture/elementwise.h"
#include "train/capture/replay_profile.h"
#include "train/capture/segment.h"
#include "train/capture/slot.h"

namespace dtensor::capture {

class Program {
 public:
  enum class CallKind : uint8_t { kValue, kEffect, kShards };

  struct Call {
    CallKind kind;
    std::string op;
    std::vector<int> inputs;  // slots
    // Per input: the metadata to re-wrap the slot's shards with, when the call saw the value
    // under another shape or layout than the slot holds (or the slot holds bare shards).
    std::vector<std::optional<ValueMeta>> rewrap;
    int output = -1;           // slot, or -1
    std::vector<int> release;  // slots whose last reader this call is
    StepObserver::ValueFn value_fn;
    StepObserver::EffectFn effect_fn;
    StepObserver::ShardFn shard_fn;
    // The kind of call for the replay profile: the op and the value it made.
    std::string label;
    // A run_local of one elementwise kernel, in the structured form that fused segments replay
    // (with the value it made, for segments that write it out).
    std::optional<ElementwiseCall> elementwise;
    std::optional<ValueMeta> result;
  };

  // A slot's value: a DTensor, or the bare shards a collective returned.
  using Slot = capture::Slot;

  // Building (the recorder).
  int add_slot(Slot slot, bool constant);
  void add_call(Call call) { calls_.push_back(std::move(call)); }
  Slot& trace_slot(int s) { return trace_slots_[static_cast<size_t>(s)]; }
  // Fixes the outputs (slot and the metadata the step returned them with) and plans when each
  // slot is dropped; the trace-time values are let go.
  void finish(int num_arguments, std::vector<int> outputs, std::vector<ValueMeta> output_meta);

  // Runs the calls on `arguments` (as many as traced, of the traced signature).
  std::vector<DTensor> replay(const std::vector<DTensor>& arguments);

  size_t num_calls() const { return calls_.size(); }
  // How many calls replay inside fused elementwise segments, and how many segments there are.
  size_t num_fused_calls() const;
  // How many values the segments write out (read later, or results of the step).
  size_t num_fused_results() const;
  size_t num_segments() const { return segments_.size(); }
  size_t num_slots() const { return trace_slots_.size(); }
  // The ops of the calls in order, e.g. "DVariable::value, relayout, run_local, ...".
  std::string to_string() const;

 private:
  const DTensor& value_for(const Call& call, size_t k, std::optional<DTensor>& scratch);
  std::vector<DTensor> run(const std::vector<DTensor>& arguments);
  void run_call(size_t c);
  // Groups runs of consecutive elementwise calls into segments_ and lists the steps_.
  // `last` is each slot's last reading call, -2 for slots kept (results, constants).
  void plan_segments(const std::vector<int>& last);
  void run_step(size_t s);

  // What a replay walks: one call, or one fused segment with the slots it releases after.
  struct Step {
    bool segment;
    uint32_t index;          // into calls_ or segments_
    uint32_t first_release;  // into instr_slots_ (segments only)
    uint32_t num_release;
  };

  // The part of a call a replay reads on every step, packed: the calls themselves are large
  // (closures, names) and their slot lists live on the heap, so a long program walked through
  // them misses the cache several times per call.
  struct Instr {
    CallKind kind;
    bool rewraps;          // some input is re-wrapped (value_for); else slots are read directly
    int32_t output;        // slot, or -1
    uint32_t first_input;  // into instr_slots_
    uint32_t num_inputs;
    uint32_t first_release;  // into instr_slots_
    uint32_t num_release;
  };

  std::vector<Call> calls_;
  std::vector<Instr> instrs_;     // one per call, after finish()
  std::vector<int> instr_slots_;  // the inputs and releases of every Instr
  std::vector<Segment> segments_;
  std::vector<size_t> segment_first_call_;  // per segment (the replay profile)
  std::vector<Step> steps_;
  std::vector<Slot> trace_slots_;  // while tracing: every value; after finish: constants only
  std::vector<bool> constant_;
  std::vector<std::optional<ValueMeta>> slot_meta_;  // per slot: its value's (none: bare shards)
  std::vector<int> outputs_;
  std::vector<ValueMeta> output_meta_;
  int num_arguments_ = 0;
  std::vector<Slot> slots_;                      // during a replay
  std::vector<std::optional<DTensor>> scratch_;  // re-wrapped inputs of the current call
  std::vector<const DTensor*> inputs_;           // input pointers of the current call
  ReplayProfile profile_;                        // DTENSOR_CAPTURE_PROFILE=1
};

}  // namespace dtensor::capture
