#include "train/capture/function.h"

#include "train/capture/recorder.h"

namespace dtensor {

Function::Function(Step step, FunctionOptions options) : state_(std::make_unique<State>()) {
  if (!step) throw_error<InvalidArgumentError>("function", "the step is empty");
  if (options.max_signatures < 1) {
    throw_error<InvalidArgumentError>("function", "max_signatures must be >= 1, got 0");
  }
  state_->step = std::move(step);
  state_->options = options;
}

Function::Function(Function&&) noexcept = default;
Function& Function::operator=(Function&&) noexcept = default;
Function::~Function() = default;

bool Function::matches(const Entry& entry, const std::vector<DTensor>& arguments) {
  if (entry.signature.size() != arguments.size()) return false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!entry.signature[i].matches(arguments[i])) return false;
  }
  return true;
}

namespace {

// A fresh handle of every argument: inside a step each argument is a value of its own (an
// argument passed twice, or one that is also a closure constant or a variable's value, is two
// values for the recorder and for gradient tapes), traced or run eagerly alike.
std::vector<DTensor> fresh_handles(const std::vector<DTensor>& arguments) {
  std::vector<DTensor> out;
  out.reserve(arguments.size());
  for (const DTensor& a : arguments) {
    out.push_back(DTensor::from_trusted_shards(a.shape(), a.dtype(), a.layout(), a.shards()));
  }
  return out;
}

}  // namespace

std::vector<DTensor> Function::operator()(const std::vector<DTensor>& arguments) {
  State& s = *state_;
  // Inside another trace the step is part of that program, whose recorder tells its values apart.
  if (StepObserver::active() != nullptr) return s.step(arguments);
  if (s.options.eager) return s.step(fresh_handles(arguments));
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.cache.begin(); it != s.cache.end(); ++it) {
    if (!matches(*it, arguments)) continue;
    if (it != s.cache.begin()) s.cache.splice(s.cache.begin(), s.cache, it);
    ++s.replays;
    return s.cache.front().program->replay(arguments);
  }
  return trace(arguments);
}

std::vector<DTensor> Function::trace(const std::vector<DTensor>& arguments) {
  State& s = *state_;
  const std::vector<DTensor> traced = fresh_handles(arguments);  // capture/recorder.h
  capture::Recorder recorder(traced);
  Entry entry;
  std::vector<DTensor> outputs;
  {
    CollectiveListener listener;
    recorder.start();
    outputs = s.step(traced);  // a throw uninstalls and caches nothing
    recorder.stop();
    entry.collectives = listener.records();
  }
  for (const DTensor& a : arguments) entry.signature.push_back(capture::ValueMeta::of(a));
  entry.program = recorder.take_program(outputs);
  ++s.traces;
  s.cache.push_front(std::move(entry));
  if (s.cache.size() > s.options.max_signatures) s.cache.pop_back();
  return outputs;
}

int64_t Function::trace_count() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->traces;
}

int64_t Function::replay_count() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->replays;
}

std::string Function::program_string(const std::vector<DTensor>& arguments) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const Entry& e : state_->cache) {
    if (matches(e, arguments)) return e.program->to_string();
  }
  return "";
}

size_t Function::program_count(const std::vector<DTensor>& arguments,
                               size_t (capture::Program::*count)() const) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const Entry& e : state_->cache) {
    if (matches(e, arguments)) return (e.program.get()->*count)();
  }
  return 0;
}

size_t Function::fused_calls(const std::vector<DTensor>& arguments) const {
  return program_count(arguments, &capture::Program::num_fused_calls);
}

size_t Function::fused_results(const std::vector<DTensor>& arguments) const {
  return program_count(arguments, &capture::Program::num_fused_results);
}

CollectiveSummary Function::collective_summary(const std::vector<DTensor>& arguments) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const Entry& e : state_->cache) {
    if (matches(e, arguments)) return CollectiveSummary::of(e.collectives);
  }
  return {};
}

Function function(Step step, FunctionOptions options) { return Function(std::move(step), options); }

}  // namespace dtensor
