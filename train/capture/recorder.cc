#include "train/capture/recorder.h"

#include <cstring>
#include <limits>

namespace dtensor::capture {

class Recorder::Pause {
 public:
  Pause() : previous_(exchange_active(nullptr)) {}
  ~Pause() { exchange_active(previous_); }
  Pause(const Pause&) = delete;
  Pause& operator=(const Pause&) = delete;

 private:
  CaptureHook* previous_;
};

Recorder::Recorder(const std::vector<DTensor>& arguments)
    : program_(std::make_unique<Program>()),
      first_traced_id_(std::numeric_limits<int64_t>::max()),
      num_arguments_(static_cast<int>(arguments.size())) {
  for (const DTensor& a : arguments) {
    const int s = program_->add_slot({a, {}}, /*constant=*/false);
    slots_[key_of(a.shards())] = s;
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
  previous_ = exchange_active(this);
  ElementwiseNotes::add(&notes_);
  installed_ = true;
}

void Recorder::stop() {
  if (!installed_) return;
  ElementwiseNotes::remove(&notes_);
  exchange_active(previous_);
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

int Recorder::slot_of(const DTensor& x, const char* op) {
  Key key = key_of(x.shards());
  auto it = slots_.find(key);
  if (it != slots_.end()) return it->second;
  if (x.id() >= first_traced_id_) {
    throw_error<UnimplementedError>(
        "function",
        "{} reads {}, which the step computed by a path the trace cannot follow (host code on "
        "the shards, or an operation without capture support); its replay would be stale",
        op, x.short_string());
  }
  const int s = program_->add_slot({x, {}}, /*constant=*/true);
  slots_.emplace(std::move(key), s);
  return s;
}

int Recorder::slot_of_shards(const std::vector<Tensor>& shards) {
  Key key = key_of(shards);
  auto it = slots_.find(key);
  if (it != slots_.end()) return it->second;
  // Bare shards from outside the trace: immutable, so a constant.
  const int s = program_->add_slot({std::nullopt, shards}, /*constant=*/true);
  slots_.emplace(std::move(key), s);
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

int Recorder::add_result(Program::Slot slot, const std::vector<Tensor>& shards) {
  const int s = program_->add_slot(std::move(slot), /*constant=*/false);
  slots_[key_of(shards)] = s;  // a later reader of these shards reads this result
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
  call.output = add_result({out, {}}, out->shards());
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
  if (!shards.empty()) call.inputs.push_back(slot_of_shards(shards));
  call.rewrap.emplace_back(std::nullopt);
  std::vector<Tensor> out;
  {
    Pause pause;
    out = run(shards);
  }
  if (!out.empty()) call.output = add_result({std::nullopt, out}, out);
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
  slots_.clear();
  program_->finish(num_arguments_, std::move(slots), std::move(meta));
  return std::move(program_);
}

}  // namespace dtensor::capture
