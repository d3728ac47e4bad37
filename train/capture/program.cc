#include "train/capture/program.h"

#include <algorithm>
#include <numeric>

namespace dtensor::capture {

int Program::add_slot(Slot slot, bool constant) {
  slot_meta_.push_back(slot.value ? std::optional<ValueMeta>(ValueMeta::of(*slot.value))
                                  : std::nullopt);
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
  instrs_.clear();
  instr_slots_.clear();
  for (const Call& call : calls_) {
    Instr in{call.kind, false, call.output, 0, 0, 0, 0};
    in.first_input = static_cast<uint32_t>(instr_slots_.size());
    in.num_inputs = static_cast<uint32_t>(call.inputs.size());
    instr_slots_.insert(instr_slots_.end(), call.inputs.begin(), call.inputs.end());
    for (const std::optional<ValueMeta>& meta : call.rewrap) in.rewraps = in.rewraps || meta;
    in.first_release = static_cast<uint32_t>(instr_slots_.size());
    in.num_release = static_cast<uint32_t>(call.release.size());
    instr_slots_.insert(instr_slots_.end(), call.release.begin(), call.release.end());
    instrs_.push_back(in);
  }
  plan_segments(last);
  slots_.assign(n, Slot());
  size_t most_inputs = 0;
  for (const Call& call : calls_) most_inputs = std::max(most_inputs, call.inputs.size());
  scratch_.assign(most_inputs, std::nullopt);
  inputs_.reserve(most_inputs);
  if (ReplayProfile::enabled_by_environment()) {
    std::vector<std::string> labels;
    for (const Call& call : calls_) labels.push_back(call.label.empty() ? call.op : call.label);
    // A segment's time goes to its first call: label it as the whole segment.
    for (size_t g = 0; g < segments_.size(); ++g) {
      std::string& label = labels[segment_first_call_[g]];
      label = "segment of " + std::to_string(segments_[g].num_calls()) + " from " + label;
    }
    profile_.start(labels);
  }
}

void Program::plan_segments(const std::vector<int>& last) {
  constexpr int kKeep = -2;
  segments_.clear();
  segment_first_call_.clear();
  steps_.clear();
  std::vector<int> producer(trace_slots_.size(), -1);
  for (size_t c = 0; c < calls_.size(); ++c) {
    if (calls_[c].output >= 0)
      producer[static_cast<size_t>(calls_[c].output)] = static_cast<int>(c);
  }
  auto fusable = [&](size_t c) {
    const Call& call = calls_[c];
    return call.elementwise && call.result && call.kind == CallKind::kValue && call.output >= 0;
  };
  auto elements = [&](size_t c, size_t d) {
    return num_elements(calls_[c].elementwise->shapes[d]);
  };
  size_t c = 0;
  while (c < calls_.size()) {
    if (!fusable(c)) {
      steps_.push_back({false, static_cast<uint32_t>(c), 0, 0});
      ++c;
      continue;
    }
    const size_t start = c;
    const size_t devices = calls_[start].elementwise->shapes.size();
    std::vector<int64_t> period(devices, 1);
    for (; c < calls_.size() && fusable(c); ++c) {
      const ElementwiseCall& e = *calls_[c].elementwise;
      bool fits = e.shapes.size() == devices;
      for (size_t d = 0; d < devices && fits; ++d) {
        fits = elements(c, d) == elements(start, d) &&
               std::lcm(period[d], e.period(d)) <= kMaxElementwisePeriod;
      }
      // A value made inside the segment lives in blocks: its readers there must read it whole.
      for (int k = 0; k < e.arity && fits; ++k) {
        const int p = producer[static_cast<size_t>(calls_[c].inputs[static_cast<size_t>(k)])];
        if (p < static_cast<int>(start)) continue;
        for (size_t d = 0; d < devices && fits; ++d) {
          fits = e.operands[d * static_cast<size_t>(e.arity) + static_cast<size_t>(k)].mode ==
                 ElementwiseOperand::Mode::kFull;
        }
      }
      if (!fits) break;
      for (size_t d = 0; d < devices; ++d) period[d] = std::lcm(period[d], e.period(d));
    }
    const size_t end = c;
    std::vector<Segment::Call> members;
    for (size_t m = start; m < end; ++m) {
      const Call& call = calls_[m];
      // How the call saw each input: re-wrapped, or as its slot holds it.
      std::vector<std::optional<ValueMeta>> input_meta;
      for (size_t k = 0; k < call.inputs.size(); ++k) {
        input_meta.push_back(call.rewrap[k] ? call.rewrap[k]
                                            : slot_meta_[static_cast<size_t>(call.inputs[k])]);
      }
      members.push_back(
          {&*call.elementwise, call.inputs, std::move(input_meta), call.output, *call.result});
    }
    auto read_later = [&](int slot) {
      const int l = last[static_cast<size_t>(slot)];
      return l == kKeep || l >= static_cast<int>(end);
    };
    Step step{true, static_cast<uint32_t>(segments_.size()),
              static_cast<uint32_t>(instr_slots_.size()), 0};
    for (size_t m = start; m < end; ++m) {
      for (int r : calls_[m].release) {
        const int p = producer[static_cast<size_t>(r)];
        // Values that stayed in registers were never put in a slot.
        if (p >= static_cast<int>(start) && !read_later(r)) continue;
        instr_slots_.push_back(r);
        ++step.num_release;
      }
    }
    segments_.emplace_back(members, read_later);
    segment_first_call_.push_back(start);
    steps_.push_back(step);
  }
}

size_t Program::num_fused_calls() const {
  size_t n = 0;
  for (const Segment& s : segments_) n += s.num_calls();
  return n;
}

size_t Program::num_fused_results() const {
  size_t n = 0;
  for (const Segment& s : segments_) n += s.num_results();
  return n;
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
    for (size_t s = 0; s < steps_.size(); ++s) {
      const ReplayProfile::Clock::time_point start = ReplayProfile::Clock::now();
      run_step(s);
      // A segment's time goes to its first call.
      const Step& step = steps_[s];
      profile_.add(step.segment ? segment_first_call_[step.index] : step.index,
                   std::chrono::duration<double>(ReplayProfile::Clock::now() - start).count());
    }
    profile_.end_replay();
  } else {
    for (size_t s = 0; s < steps_.size(); ++s) run_step(s);
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

void Program::run_step(size_t s) {
  const Step& step = steps_[s];
  if (!step.segment) {
    run_call(step.index);
    return;
  }
  segments_[step.index].run(slots_);
  const int* release = instr_slots_.data() + step.first_release;
  for (size_t r = 0; r < step.num_release; ++r) slots_[static_cast<size_t>(release[r])] = Slot();
}

void Program::run_call(size_t c) {
  const Instr& in = instrs_[c];
  const int* inputs = instr_slots_.data() + in.first_input;
  if (in.kind == CallKind::kShards) {
    static const std::vector<Tensor> kNone;
    const std::vector<Tensor>& shards =
        in.num_inputs == 0 ? kNone : slots_[static_cast<size_t>(inputs[0])].shards_of();
    std::vector<Tensor> out = calls_[c].shard_fn(shards);
    if (in.output >= 0) slots_[static_cast<size_t>(in.output)].shards = std::move(out);
  } else {
    inputs_.clear();
    if (in.rewraps) {
      for (size_t k = 0; k < in.num_inputs; ++k) {
        inputs_.push_back(&value_for(calls_[c], k, scratch_[k]));
      }
    } else {
      for (size_t k = 0; k < in.num_inputs; ++k) {
        inputs_.push_back(&*slots_[static_cast<size_t>(inputs[k])].value);
      }
    }
    if (in.kind == CallKind::kValue) {
      slots_[static_cast<size_t>(in.output)].value = calls_[c].value_fn(inputs_);
    } else {
      calls_[c].effect_fn(inputs_);
    }
    if (in.rewraps) {
      for (size_t k = 0; k < in.num_inputs; ++k) scratch_[k].reset();
    }
  }
  const int* release = instr_slots_.data() + in.first_release;
  for (size_t r = 0; r < in.num_release; ++r) slots_[static_cast<size_t>(release[r])] = Slot();
}

std::string Program::to_string() const {
  std::string s;
  for (const Call& call : calls_) s += (s.empty() ? "" : ", ") + call.op;
  return s;
}

}  // namespace dtensor::capture
