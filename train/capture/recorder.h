// Recorder: the StepObserver (dtensor/step_observer.h) a Function installs while it traces a step.
// Every call the eager code hands it runs at once (recording paused, so nested work is not recorded
// twice) and is appended to a Program.
//
// Identity: a DTensor input resolves to a slot by its value identity, its id (DTensor::id) with
// the storage of its shards: copies of one handle meet the same slot; aliases, handles that share
// buffers but are different values of the step (an argument passed twice, an argument that is also
// a closure constant or a variable's value), get slots of their own, so a replay with different
// values for them reads each. The storage part tells apart the values one id names over time (a
// DVariable gives every value it holds the variable's one id). Function hands the step a fresh
// handle (a new id) for every argument, so arguments never share an identity with each other or
// with anything the step reads from its closure.
//
// Bare shards (collectives work on them, below the DTensor level) have no id: they resolve by
// storage. A DTensor made during the trace by code that wraps shards without a call (a
// collective's result wrapped as a DTensor) resolves by storage too. When several values of
// different origins hold those buffers, the read is ambiguous and the recorder refuses it rather
// than guess.
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
#include <string>
#include <utility>
#include <vector>

#include "train/capture/program.h"

namespace dtensor::capture {

class Recorder final : public StepObserver {
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
  // The storage of a value: every shard's buffer address, dtype and shape.
  using Key = std::vector<int64_t>;
  static Key key_of(const std::vector<Tensor>& shards);
  int slot_of(const DTensor& x, const char* op);
  int slot_of_shards(const std::vector<Tensor>& shards, const char* op);
  // The latest slot holding `key`'s buffers, -1 if none; throws when values of different origins
  // hold them (an alias the caller cannot tell apart).
  int slot_by_storage(const Key& key, const char* op, const char* what);
  void resolve(const Inputs& inputs, const char* op, Program::Call& call);
  // Registers slot `s` holding `shards` (as DTensor `id`, or bare shards with id -1). Its origin
  // is the input slot whose buffers it returned, if any (the same value), else itself.
  void add_value(int s, int64_t id, const Key& key, const std::vector<int>& inputs, const char* op);
  int add_result(Program::Slot slot, int64_t id, const std::vector<int>& inputs, const char* op);

  std::unique_ptr<Program> program_;
  std::map<std::pair<int64_t, Key>, int> values_;  // (DTensor id, storage) -> slot
  std::map<Key, std::vector<int>> by_storage_;     // storage -> slots holding it, oldest first
  std::vector<int> origin_;                        // per slot
  std::vector<std::string> producer_;              // per slot: the op that made it ("" if none)
  std::vector<Key> keys_;                          // per slot
  std::vector<int64_t> ids_;                       // per slot: its DTensor id, -1 for shards
  int64_t first_traced_id_;  // DTensors with ids from here on were made during the trace
  int num_arguments_;
  bool installed_ = false;
  std::vector<ElementwiseNote> notes_;  // registered with ElementwiseNotes while installed
};

}  // namespace dtensor::capture
