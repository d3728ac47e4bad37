#include "ops/autograd.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "dtensor/collectives.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
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

// The tapes' observer of the step (dtensor/step_observer.h), installed on a thread while it has
// a tape: a relayout of a tracked value is an op like any other; the gradient of the moved value
// goes back to the source's layout (sums brought whole: the value is the same). It only listens:
// inside a captured step the recorder takes the work, and the tape still hears of relayouts.
class TapeListener final : public StepObserver {
 public:
  TapeListener() : StepObserver(Role::kListens) {}

  void relayouted(const DTensor& input, const DTensor& output) override {
    if (!tape_active() || !is_floating(output.dtype())) return;
    const Layout back = input.layout().without_partial();
    record_op({&input}, output, [back](const DTensor& g) -> Grads { return {relayout(g, back)}; });
  }

  std::vector<Tensor> shard_call(const char* op, const std::vector<Tensor>&, ShardFn) override {
    throw_error<InternalError>(op, "the gradient tape's listener was handed work");
  }
  DTensor call(const char* op, const Inputs&, ValueFn) override {
    throw_error<InternalError>(op, "the gradient tape's listener was handed work");
  }
  void effect(const char* op, const Inputs&, EffectFn) override {
    throw_error<InternalError>(op, "the gradient tape's listener was handed work");
  }
};

thread_local TapeListener tape_listener;

}  // namespace

GradientTape::GradientTape() {
  if (tapes.active.empty()) StepObserver::install(&tape_listener);
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
    if (tapes.active.empty()) StepObserver::uninstall(&tape_listener);
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

namespace {

std::atomic<bool> overlap_setting{true};
std::atomic<double> bucket_cap_mb_setting{25.0};

// The buckets of gradients being reduced across processes while backward runs (see
// GradientReductionOptions in the header).
class OverlappedReduction {
 public:
  explicit OverlappedReduction(double cap_bytes) : cap_bytes_(cap_bytes) {}

  // Takes the final gradient `g` of source `index` when it is a partial sum over mesh dims whose
  // groups span processes; false (left to the caller) otherwise.
  bool add(size_t index, const DTensor& g) {
    if (!spans_processes(g)) return false;
    const MeshDimMask mask = g.layout().partial_mask();
    if (open_ && (open_->mask != mask || open_->dtype != g.dtype() ||
                  !(open_->entries[0].grad.mesh() == g.mesh()))) {
      start_open();
    }
    if (!open_) {
      open_.emplace();
      open_->mask = mask;
      open_->dtype = g.dtype();
    }
    open_->entries.push_back({index, g});
    open_->bytes += static_cast<double>(g.shard(0).nbytes());
    // Like PyTorch DDP, the first bucket is small (1 MiB at most), so that the reduction starts
    // early in backward even for a model that fits one bucket whole.
    const double cap = started_.empty() ? std::min(cap_bytes_, kFirstBucketBytes) : cap_bytes_;
    if (open_->bytes >= cap) start_open();
    return true;
  }

  // Lets the buckets in flight progress.
  void progress() {
    for (; tested_ < started_.size() && started_[tested_].pending.test(); ++tested_) {
    }
  }

  // Starts the last bucket, waits for every one and puts each taken gradient, reduced (no longer
  // partial), at its source index of `out`.
  void finish(std::vector<DTensor>& out) {
    start_open();
    for (Bucket& b : started_) {
      std::vector<std::vector<Tensor>> results = b.pending.wait();
      for (size_t t = 0; t < b.entries.size(); ++t) {
        const DTensor& g = b.entries[t].grad;
        out[b.entries[t].index] = DTensor::from_trusted_shards(
            g.shape(), g.dtype(), g.layout().without_partial(), std::move(results[t]));
      }
    }
    started_.clear();
  }

 private:
  struct Entry {
    size_t index;
    DTensor grad;
  };
  struct Bucket {
    MeshDimMask mask = 0;
    DType dtype = DType::kF32;
    std::vector<Entry> entries;
    double bytes = 0;
    PendingAllReduce pending;
  };

  static bool spans_processes(const DTensor& g) {
    const Mesh& mesh = g.mesh();
    if (mesh.num_processes() == 1 || !g.layout().is_partial()) return false;
    for (const PartialDim& p : g.layout().partial()) {
      if (p.op != ReduceOp::kSum) return false;
    }
    const std::vector<int64_t> group = mesh.groups(g.layout().partial_mask())[0];
    for (int64_t d : group) {
      if (mesh.owner_process(d) != mesh.owner_process(group[0])) return true;
    }
    return false;
  }

  void start_open() {
    if (!open_) return;
    std::vector<std::vector<Tensor>> tensors;
    tensors.reserve(open_->entries.size());
    for (const Entry& e : open_->entries) tensors.push_back(e.grad.shards());
    open_->pending =
        all_reduce_start(open_->entries[0].grad.mesh(), open_->mask, tensors, ReduceOp::kSum);
    started_.push_back(std::move(*open_));
    open_.reset();
  }

  static constexpr double kFirstBucketBytes = 1 << 20;

  const double cap_bytes_;
  std::optional<Bucket> open_;
  std::vector<Bucket> started_;
  size_t tested_ = 0;  // started_[0, tested_) are done
};

// Reverse-mode accumulation over `records`; with `overlap`, each source's gradient goes to it as
// soon as it is final (after the first record, in recording order, that reads the source).
std::vector<DTensor> run_backward(const std::vector<GradientTape::Record>& records,
                                  const DTensor& target, const std::vector<DTensor>& sources,
                                  OverlappedReduction* overlap) {
  NoRecord pause;
  std::unordered_map<int64_t, DTensor> grads;
  grads.emplace(target.id(),
                ones(target.shape(), target.layout().without_partial(), target.dtype()));
  // final_after[r]: the sources whose gradient is complete once record r has run.
  std::vector<std::vector<size_t>> final_after;
  if (overlap != nullptr) {
    std::unordered_map<int64_t, size_t> first_use;
    for (size_t r = 0; r < records.size(); ++r) {
      for (int64_t id : records[r].inputs) first_use.emplace(id, r);
    }
    final_after.resize(records.size());
    for (size_t i = 0; i < sources.size(); ++i) {
      auto it = first_use.find(sources[i].id());
      if (it != first_use.end()) final_after[it->second].push_back(i);
    }
  }
  for (size_t r = records.size(); r-- > 0;) {
    const GradientTape::Record& record = records[r];
    auto g = grads.find(record.output);
    if (g != grads.end()) {
      tapes.running = &record.tracked;
      std::vector<std::optional<DTensor>> input_grads;
      try {
        input_grads = record.vjp(g->second);
      } catch (...) {
        tapes.running = nullptr;
        throw;
      }
      tapes.running = nullptr;
      for (size_t i = 0; i < record.inputs.size() && i < input_grads.size(); ++i) {
        if (!input_grads[i]) continue;
        auto [slot, fresh] = grads.try_emplace(record.inputs[i], *input_grads[i]);
        if (!fresh) slot->second = add(slot->second, *input_grads[i]);
      }
    }
    if (overlap != nullptr) {
      for (size_t i : final_after[r]) {
        auto done = grads.find(sources[i].id());
        if (done != grads.end()) overlap->add(i, done->second);
      }
      overlap->progress();
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

}  // namespace

void set_gradient_reduction_options(const GradientReductionOptions& options) {
  if (!(options.bucket_cap_mb > 0) || !std::isfinite(options.bucket_cap_mb)) {
    throw_error<InvalidArgumentError>("set_gradient_reduction_options",
                                      "bucket_cap_mb must be a positive number, got {}",
                                      options.bucket_cap_mb);
  }
  overlap_setting.store(options.overlap);
  bucket_cap_mb_setting.store(options.bucket_cap_mb);
}

GradientReductionOptions gradient_reduction_options() {
  return {overlap_setting.load(), bucket_cap_mb_setting.load()};
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DTensor>& sources) {
  return run_backward(records_, target, sources, nullptr);
}

std::vector<DTensor> GradientTape::gradient(const DTensor& target,
                                            const std::vector<DVariable>& sources) {
  NoRecord pause;
  std::vector<DTensor> values;
  bool across_processes = false;
  for (const DVariable& v : sources) {
    values.push_back(v.value());
    across_processes = across_processes || v.value().mesh().num_processes() > 1;
  }
  std::vector<DTensor> grads;
  if (across_processes && overlap_setting.load(std::memory_order_relaxed)) {
    OverlappedReduction overlap(bucket_cap_mb_setting.load(std::memory_order_relaxed) * 1048576.0);
    grads = run_backward(records_, target, values, &overlap);
    overlap.finish(grads);
  } else {
    grads = run_backward(records_, target, values, nullptr);
  }
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = relayout(grads[i], sources[i].layout());
  return grads;
}

}  // namespace dtensor
