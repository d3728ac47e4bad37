#include "train/capture/recorder.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace dtensor::capture {

Recorder::Recorder(const std::vector<DTensor>& arguments)
    : StepObserver(Role::kTakesWork),
      program_(std::make_unique<Program>()),
      first_traced_id_(std::numeric_limits<int64_t>::max()),
      num_arguments_(static_cast<int>(arguments.size())) {
  for (const DTensor& a : arguments) {
    const int s = program_->add_slot({a, {}}, /*constant=*/false);
    add_value(s, a.id(), key_of(a.shards()), {}, "");
  }
  // A fresh DTensor's id marks where values made during the trace begin.
  if (!arguments.empty()) {
    const DTensor& a = arguments[0];
    first_traced_id_ =
        DTensor::from_trusted_shards(a.shape(), a.dtype(), a.layout(), a.shards()).id();
  }
}

Recorder::~Recorder() { stop(); }

void Recorder::start() {
  if (installed_) return;
  install(this);
  ElementwiseNotes::add(&notes_);
  installed_ = true;
}

void Recorder::stop() {
  if (!installed_) return;
  ElementwiseNotes::remove(&notes_);
  uninstall(this);
  installed_ = false;
}

Recorder::Key Recorder::key_of(const std::vector<Tensor>& shards) {
  Key key;
  key.reserve(shards.size() * 4);
  for (const Tensor& t : shards) {
    key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.raw_data())));
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(t.rank());
    key.insert(key.end(), t.shape().begin(), t.shape().end());
  }
  return key;
}

void Recorder::add_value(int s, int64_t id, const Key& key, const std::vector<int>& inputs,
                         const char* op) {
  const size_t slot = static_cast<size_t>(s);
  origin_.resize(std::max(origin_.size(), slot + 1), -1);
  producer_.resize(origin_.size());
  keys_.resize(origin_.size());
  ids_.resize(origin_.size(), -1);
  origin_[slot] = s;
  producer_[slot] = op;
  keys_[slot] = key;
  ids_[slot] = id;
  // A call that hands back an input's buffers (a view, an identity kernel) made the same value.
  for (int in : inputs) {
    if (keys_[static_cast<size_t>(in)] == key) origin_[slot] = origin_[static_cast<size_t>(in)];
  }
  std::vector<int>& holders = by_storage_[key];
  // Reads with no inputs that return the same buffers (a variable read twice with no update
  // between) are one value.
  if (inputs.empty() && *op != '\0') {
    for (int h : holders) {
      if (producer_[static_cast<size_t>(h)] == op && ids_[static_cast<size_t>(h)] == id) {
        origin_[slot] = origin_[static_cast<size_t>(h)];
      }
    }
  }
  holders.push_back(s);
  if (id >= 0) values_[{id, key}] = s;  // a later reader of this handle reads this slot
}

int Recorder::slot_by_storage(const Key& key, const char* op, const char* what) {
  auto it = by_storage_.find(key);
  if (it == by_storage_.end()) return -1;
  const std::vector<int>& holders = it->second;
  const int latest = holders.back();
  for (int h : holders) {
    if (origin_[static_cast<size_t>(h)] != origin_[static_cast<size_t>(latest)]) {
      throw_error<UnimplementedError>(
          "function",
          "{} reads {} whose buffers several values of the step hold (an argument passed twice, "
          "or also read from the closure or a variable); the trace cannot tell which one it "
          "reads: pass a copy",
          op, what);
    }
  }
  return latest;
}

int Recorder::slot_of(const DTensor& x, const char* op) {
  Key key = key_of(x.shards());
  auto it = values_.find({x.id(), key});
  if (it != values_.end()) return it->second;
  if (x.id() >= first_traced_id_) {
    // Made during the trace around buffers the recorder knows (a collective's result wrapped as a
    // DTensor): the slot that holds them.
    const std::string what = x.short_string();
    const int s = slot_by_storage(key, op, what.c_str());
    if (s < 0) {
      throw_error<UnimplementedError>(
          "function",
          "{} reads {}, which the step computed by a path the trace cannot follow (host code on "
          "the shards, or an operation without capture support); its replay would be stale",
          op, what);
    }
    values_.emplace(std::make_pair(x.id(), std::move(key)), s);
    return s;
  }
  const int s = program_->add_slot({x, {}}, /*constant=*/true);
  add_value(s, x.id(), key, {}, "");
  return s;
}

int Recorder::slot_of_shards(const std::vector<Tensor>& shards, const char* op) {
  Key key = key_of(shards);
  const int found = slot_by_storage(key, op, "shards");
  if (found >= 0) return found;
  // Bare shards from outside the trace: immutable, so a constant.
  const int s = program_->add_slot({std::nullopt, shards}, /*constant=*/true);
  add_value(s, -1, key, {}, "");
  return s;
}

void Recorder::resolve(const Inputs& inputs, const char* op, Program::Call& call) {
  for (const DTensor* x : inputs) {
    const int s = slot_of(*x, op);
    call.inputs.push_back(s);
    const Program::Slot& slot = program_->trace_slot(s);
    if (slot.value && ValueMeta::of(*slot.value).matches(*x)) {
      call.rewrap.emplace_back(std::nullopt);
    } else {
      call.rewrap.emplace_back(ValueMeta::of(*x));
    }
  }
}

int Recorder::add_result(Program::Slot slot, int64_t id, const std::vector<int>& inputs,
                         const char* op) {
  Key key = key_of(slot.shards_of());
  const int s = program_->add_slot(std::move(slot), /*constant=*/false);
  add_value(s, id, key, inputs, op);
  return s;
}

DTensor Recorder::call(const char* op, const Inputs& inputs, ValueFn run) {
  Program::Call call{Program::CallKind::kValue, op, {}, {}, -1, {}, {}, {}, {}, {}, {}, {}};
  resolve(inputs, op, call);
  // A run_local may be one elementwise kernel per device: its notes say which (elementwise.h).
  const bool local = std::strcmp(op, "run_local") == 0;
  if (local) ElementwiseNotes::take(&notes_);
  std::optional<DTensor> out;
  {
    Pause pause;
    out = run(inputs);
  }
  if (local) {
    call.elementwise = match_elementwise(ElementwiseNotes::take(&notes_), inputs, *out);
    call.result = ValueMeta::of(*out);
  }
  call.output = add_result({out, {}}, out->id(), call.inputs, op);
  call.label = std::string(op) + " " + out->short_string();
  call.value_fn = std::move(run);
  program_->add_call(std::move(call));
  return *out;
}

void Recorder::effect(const char* op, const Inputs& inputs, EffectFn run) {
  Program::Call call{Program::CallKind::kEffect, op, {}, {}, -1, {}, {}, {}, {}, {}, {}, {}};
  resolve(inputs, op, call);
  {
    Pause pause;
    run(inputs);
  }
  call.effect_fn = std::move(run);
  program_->add_call(std::move(call));
}

std::vector<Tensor> Recorder::shard_call(const char* op, const std::vector<Tensor>& shards,
                                         ShardFn run) {
  Program::Call call{Program::CallKind::kShards, op, {}, {}, -1, {}, {}, {}, {}, {}, {}, {}};
  if (!shards.empty()) call.inputs.push_back(slot_of_shards(shards, op));
  call.rewrap.emplace_back(std::nullopt);
  std::vector<Tensor> out;
  {
    Pause pause;
    out = run(shards);
  }
  if (!out.empty()) call.output = add_result({std::nullopt, out}, -1, call.inputs, op);
  call.label =
      std::string(op) + (out.empty() ? ""
                                     : " " + std::to_string(out.size()) + " shards, the first " +
                                           shape_to_string(out[0].shape()));
  call.shard_fn = std::move(run);
  program_->add_call(std::move(call));
  return out;
}

std::unique_ptr<Program> Recorder::take_program(const std::vector<DTensor>& outputs) {
  std::vector<int> slots;
  std::vector<ValueMeta> meta;
  for (const DTensor& y : outputs) {
    slots.push_back(slot_of(y, "the step's result"));
    meta.push_back(ValueMeta::of(y));
  }
  values_.clear();
  by_storage_.clear();
  program_->finish(num_arguments_, std::move(slots), std::move(meta));
  return std::move(program_);
}

}  // namespace dtensor::capture
