#include "ops/autograd.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/ops.h"

namespace dtensor {

struct GradientTape::Record {
  std::vector<int64_t> inputs;
  std::vector<bool> tracked;  // per input: depends on a watched value
  int64_t output;
  Vjp vjp;
};

namespace {

using Grads = std::vector<std::optional<DTensor>>;

struct ThreadTapes {
  std::vector<GradientTape*> active;
  std::vector<std::unordered_set<int64_t>> tracked;  // per active tape
  // Per active tape: output id -> index of its note_untraced placeholder record.
  std::vector<std::unordered_map<int64_t, size_t>> placeholders;
  int paused = 0;
  const std::vector<bool>* running = nullptr;  // the tracked inputs of the VJP being run
};

thread_local ThreadTapes tapes;

// relayout's hook: a relayout of a tracked value is an op like any other; the gradient of the
// moved value goes back to the source's layout (sums brought whole: the value is the same).
void record_relayout(const DTensor& input, const DTensor& output) {
  if (!tape_active() || !is_floating(output.dtype())) return;
  const Layout back = input.layout().without_partial();
  record_op({&input}, output, [back](const DTensor& g) -> Grads { return {relayout(g, back)}; });
}

}  // namespace

GradientTape::GradientTape() {
  set_relayout_recorder(record_relayout);
  tapes.active.push_back(this);
  tapes.tracked.emplace_back();
  tapes.placeholders.emplace_back();
}

GradientTape::~GradientTape() {
  auto it = std::find(tapes.active.begin(), tapes.active.end(), this);
  if (it != tapes.active.end()) {
    const auto index = it - tapes.active.begin();
    tapes.tracked.erase(tapes.tracked.begin() + index);
    tapes.placeholders.erase(tapes.placeholders.begin() + index);
    tapes.active.erase(it);
  }
}

void GradientTape::watch(const DTensor& x) {
  auto it = std::find(tapes.active.begin(), tapes.active.end(), this);
  if (it != tapes.active.end()) tapes.tracked[it - tapes.active.begin()].insert(x.id());
  watched_.push_back(x.id());
}

// A variable's values all share its value id, so watching one read watches every read.
void GradientTape::watch(const DVariable& v) { watch(v.value()); }

NoRecord::NoRecord() { ++tapes.paused; }
NoRecord::~NoRecord() { --tapes.paused; }

bool tape_active() { return !tapes.active.empty() && tapes.paused == 0; }

bool gradient_needed(size_t input) {
  const std::vector<bool>* tracked = tapes.running;
  return tracked == nullptr || input >= tracked->size() || (*tracked)[input];
}

void record_on_tapes(const std::vector<const DTensor*>& inputs, const DTensor& output, Vjp vjp,
                     bool placeholder);

namespace {

// Whether tape `t` tracks one of `inputs` (only floating ones count for a placeholder: integer
// and bool inputs are data whatever the caller watched).
bool depends_on_tracked(size_t t, const std::vector<const DTensor*>& inputs, bool floating_only) {
  for (const DTensor* in : inputs) {
    if (tapes.tracked[t].count(in->id()) > 0 && (!floating_only || is_floating(in->dtype())))
      return true;
  }
  return false;
}

}  // namespace

void record_on_tapes(const std::vector<const DTensor*>& inputs, const DTensor& output, Vjp vjp,
                     bool placeholder) {
  // An identity op: the output is the input's value and gets its gradient directly. Recording
  // it would make a self-loop that adds the gradient to itself.
  for (const DTensor* in : inputs) {
    if (in->id() == output.id()) return;
  }
  for (size_t t = 0; t < tapes.active.size(); ++t) {
    auto& tracked = tapes.tracked[t];
    auto& placeholders = tapes.placeholders[t];
    auto stale = placeholders.find(output.id());
    // The op's own record replaces its placeholder, whatever it depends on.
    const bool replaces = !placeholder && stale != placeholders.end();
    if (!replaces && !depends_on_tracked(t, inputs, placeholder)) continue;
    GradientTape::Record r;
    for (const DTensor* in : inputs) {
      r.inputs.push_back(in->id());
      r.tracked.push_back(tracked.count(in->id()) > 0);
    }
    r.output = output.id();
    r.vjp = vjp;
    auto& records = tapes.active[t]->records_;
    if (replaces) {
      records[stale->second] = std::move(r);
      placeholders.erase(stale);
    } else if (stale == placeholders.end()) {
      if (placeholder) placeholders.emplace(output.id(), records.size());
      records.push_back(std::move(r));
    }
    tracked.insert(output.id());
  }
}

void record_op(const std::vector<const DTensor*>& inputs, const DTensor& output, Vjp vjp) {
  if (!tape_active()) return;
  record_on_tapes(inputs, output, std::move(vjp), /*placeholder=*/false);
}

void note_untraced(const char* op, const std::vector<const DTensor*>& inputs,
                   const DTensor& output) {
  if (!tape_active() || !is_floating(output.dtype())) return;
  bool tracked = false;
  for (size_t t = 0; t < tapes.active.size() && !tracked; ++t)
    tracked = depends_on_tracked(t, inputs, /*floating_only=*/true);
  if (!tracked) return;
  // Callers pass the op's name; anything from ':' or ',' on is a key's attributes, left out.
  const std::string name(op, std::strcspn(op, ":,"));
  Vjp missing = [name, what = output.short_string()](const DTensor&) -> Grads {
    throw_error<UnimplementedError>(
        "GradientTape::gradient",
        "op '{}' has no gradient (VJP), and the gradient of the target reaches its output {}", name,
        what);
  };
  record_on_tapes(inputs, output, std::move(missing), /*placeholder=*/true);
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DTensor>& sources) {
  NoRecord pause;
  std::unordered_map<int64_t, DTensor> grads;
  grads.emplace(target.id(),
                ones(target.shape(), target.layout().without_partial(), target.dtype()));
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    auto g = grads.find(it->output);
    if (g == grads.end()) continue;
    tapes.running = &it->tracked;
    std::vector<std::optional<DTensor>> input_grads;
    try {
      input_grads = it->vjp(g->second);
    } catch (...) {
      tapes.running = nullptr;
      throw;
    }
    tapes.running = nullptr;
    for (size_t i = 0; i < it->inputs.size() && i < input_grads.size(); ++i) {
      if (!input_grads[i]) continue;
      auto [slot, fresh] = grads.try_emplace(it->inputs[i], *input_grads[i]);
      if (!fresh) slot->second = add(slot->second, *input_grads[i]);
    }
  }
  std::vector<DTensor> out;
  for (const DTensor& s : sources) {
    auto g = grads.find(s.id());
    out.push_back(g != grads.end() ? g->second
                                   : zeros(s.shape(), s.layout().without_partial(), s.dtype()));
  }
  return out;
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DVariable>& sources) {
  NoRecord pause;
  std::vector<DTensor> values;
  for (const DVariable& v : sources) values.push_back(v.value());
  std::vector<DTensor> grads = gradient(target, values);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = relayout(grads[i], sources[i].layout());
  return grads;
}

}  // namespace dtensor
