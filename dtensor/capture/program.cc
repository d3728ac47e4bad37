#include "dtensor/capture/program.h"

#include <algorithm>

namespace dtensor::capture {

int Program::add_slot(Slot slot, bool constant) {
  trace_slots_.push_back(std::move(slot));
  constant_.push_back(constant);
  return static_cast<int>(trace_slots_.size()) - 1;
}

void Program::finish(int num_arguments, std::vector<int> outputs,
                     std::vector<ValueMeta> output_meta) {
  num_arguments_ = num_arguments;
  outputs_ = std::move(outputs);
  output_meta_ = std::move(output_meta);
  const size_t n = trace_slots_.size();
  // The last reader of every slot; outputs and constants are never dropped.
  constexpr int kKeep = -2;
  std::vector<int> last(n, -1);
  for (size_t c = 0; c < calls_.size(); ++c) {
    for (int s : calls_[c].inputs) last[static_cast<size_t>(s)] = static_cast<int>(c);
  }
  for (int s : outputs_) last[static_cast<size_t>(s)] = kKeep;
  for (size_t s = 0; s < n; ++s) {
    if (constant_[s]) {
      last[s] = kKeep;
    } else {
      trace_slots_[s] = Slot();  // only constants are kept between replays
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (last[s] >= 0) calls_[static_cast<size_t>(last[s])].release.push_back(static_cast<int>(s));
  }
  // A result no one reads (a value the step dropped) goes as soon as it is made.
  for (Call& call : calls_) {
    if (call.output >= 0 && last[static_cast<size_t>(call.output)] == -1) {
      call.release.push_back(call.output);
    }
  }
  slots_.assign(n, Slot());
  size_t most_inputs = 0;
  for (const Call& call : calls_) most_inputs = std::max(most_inputs, call.inputs.size());
  scratch_.assign(most_inputs, std::nullopt);
  inputs_.reserve(most_inputs);
  if (ReplayProfile::enabled_by_environment()) {
    std::vector<std::string> labels;
    for (const Call& call : calls_) labels.push_back(call.label.empty() ? call.op : call.label);
    profile_.start(labels);
  }
}

const DTensor& Program::value_for(const Call& call, size_t k, std::optional<DTensor>& scratch) {
  const Slot& slot = slots_[static_cast<size_t>(call.inputs[k])];
  const std::optional<ValueMeta>& meta = call.rewrap[k];
  if (!meta) return *slot.value;
  scratch = DTensor::from_trusted_shards(meta->shape, meta->dtype, meta->layout, slot.shards_of());
  return *scratch;
}

std::vector<DTensor> Program::replay(const std::vector<DTensor>& arguments) {
  DTENSOR_CHECK(static_cast<int>(arguments.size()) == num_arguments_);
  try {
    return run(arguments);
  } catch (...) {
    // A call that threw (a replay-time check) leaves no values behind for the next replay.
    for (Slot& slot : slots_) slot = Slot();
    for (std::optional<DTensor>& s : scratch_) s.reset();
    throw;
  }
}

std::vector<DTensor> Program::run(const std::vector<DTensor>& arguments) {
  for (size_t s = 0; s < trace_slots_.size(); ++s) {
    if (constant_[s]) slots_[s] = trace_slots_[s];
  }
  for (int a = 0; a < num_arguments_; ++a) slots_[static_cast<size_t>(a)].value = arguments[a];
  if (profile_.on()) {
    for (size_t c = 0; c < calls_.size(); ++c) {
      const ReplayProfile::Clock::time_point start = ReplayProfile::Clock::now();
      run_call(calls_[c]);
      profile_.add(c, std::chrono::duration<double>(ReplayProfile::Clock::now() - start).count());
    }
    profile_.end_replay();
  } else {
    for (const Call& call : calls_) run_call(call);
  }
  std::vector<DTensor> out;
  out.reserve(outputs_.size());
  for (size_t o = 0; o < outputs_.size(); ++o) {
    const Slot& slot = slots_[static_cast<size_t>(outputs_[o])];
    const ValueMeta& meta = output_meta_[o];
    out.push_back(
        slot.value && meta.matches(*slot.value)
            ? *slot.value
            : DTensor::from_trusted_shards(meta.shape, meta.dtype, meta.layout, slot.shards_of()));
  }
  for (Slot& slot : slots_) slot = Slot();
  return out;
}

void Program::run_call(const Call& call) {
  if (call.kind == CallKind::kShards) {
    static const std::vector<Tensor> kNone;
    const std::vector<Tensor>& in =
        call.inputs.empty() ? kNone : slots_[static_cast<size_t>(call.inputs[0])].shards_of();
    std::vector<Tensor> out = call.shard_fn(in);
    if (call.output >= 0) slots_[static_cast<size_t>(call.output)].shards = std::move(out);
  } else {
    inputs_.clear();
    for (size_t k = 0; k < call.inputs.size(); ++k) {
      inputs_.push_back(&value_for(call, k, scratch_[k]));
    }
    if (call.kind == CallKind::kValue) {
      slots_[static_cast<size_t>(call.output)].value = call.value_fn(inputs_);
    } else {
      call.effect_fn(inputs_);
    }
    for (size_t k = 0; k < call.inputs.size(); ++k) scratch_[k].reset();
  }
  for (int s : call.release) slots_[static_cast<size_t>(s)] = Slot();
}

std::string Program::to_string() const {
  std::string s;
  for (const Call& call : calls_) s += (s.empty() ? "" : ", ") + call.op;
  return s;
}

}  // namespace dtensor::capture
