// fully_shard's memory and step time for examples/transformer's model (2 layers, d=128, 4 heads,
// context 64, batch 16, vocab 96) on data=1, data=8 and data=2,seq=2,model=2, with composed or
// fused attention: per plan (no fsdp, fsdp,
// fsdp with reshard_after_forward), the parameter and Adam-slot bytes device 0 holds
// ("transformer_resident") and their peak during an eager training step, the live gathered
// copies counted by the model's GatherMeter ("transformer_peak"); then the median captured-step
// time of each plan and its tokens/s, the plans taking turns for --rounds rounds
// ("transformer_step", "transformer_tokens"); the bound
// the acceptance sets on the peak, 1/N of the replicated case plus one layer (its parameters and
// slots), plus one block's gathered weights with prefetch ("transformer_peak_bound"). For plans
// with prefetch, the timeline of one replayed step: every gather and compute span
// ("transformer_span", microseconds from the step's start) and how long each gather ran while a
// block computed ("transformer_overlap"); --trace writes data=8's fsdp+reshard+prefetch step as
// a chrome://tracing JSON.
// --plans=meshes times the step on data=1, data=8, model=8 and data=2,seq=2,model=2 (fsdp)
// instead, without the memory figures; its lines say whether the deterministic mode
// (DTENSOR_DETERMINISTIC=1, read once per process) was on: bench/deterministic_cost.sh runs it
// with the mode off and on in turn.
#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/expand.h"
#include "ops/ops.h"
#include "train/parallel/lm_trainer.h"

namespace {

using namespace dtensor;
using namespace dtensor::parallel;

constexpr int64_t kBatch = 16, kContext = 64, kVocab = 96, kDim = 128;
int64_t layers = 2;

TransformerConfig config(bool fused) {
  TransformerConfig c;
  c.fused_attention = fused;
  c.vocab = kVocab;
  c.dim = kDim;
  c.heads = 4;
  c.layers = layers;
  c.seed = 7;
  return c;
}

DTensor make_tokens(const Mesh& mesh, const ParallelPlan& plan) {
  Tensor t = Tensor::empty({kBatch, kContext}, DType::kI32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int32_t>()[i] = (i * 7 + i / 5) % 96;
  return distribute(t, plan.data.empty() ? Layout::replicated(mesh, 2)
                                         : Layout::batch_sharded(mesh, plan.data, 2));
}

// The example's model under a plan, and its batch (the tokens are their own labels).
struct Setup : LmTrainer {
  Setup(const std::string& spec, const ParallelPlan& plan, bool fused)
      : LmTrainer(config(fused), Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU), plan, 1e-3),
        tokens(make_tokens(mesh(), plan)) {}
  DTensor tokens;
};

// Bytes of one block's parameters (f32).
int64_t block_bytes() { return 4 * (4 * kDim * kDim + 2 * kDim * 4 * kDim + 2 * kDim); }

// The spans of one replayed step, and for each gather the microseconds it ran while a block
// computed.
void report_timeline(const std::vector<dtensor::bench::Field>& params,
                     const std::vector<Timeline::Span>& spans) {
  for (const Timeline::Span& s : spans) {
    std::vector<dtensor::bench::Field> p = params;
    p.insert(p.end(), {{"span", s.name}, {"lane", s.lane}, {"begin_us", s.begin_us}});
    dtensor::bench::report("transformer_span", p, s.end_us - s.begin_us, "us");
  }
  for (const Timeline::Span& g : spans) {
    if (g.lane != "gather") continue;
    double overlap = 0;
    std::string with;
    for (const Timeline::Span& c : spans) {
      const double both = std::min(g.end_us, c.end_us) - std::max(g.begin_us, c.begin_us);
      if (c.lane != "compute" || both <= 0) continue;
      overlap += both;
      with += (with.empty() ? "" : ", ") + c.name;
    }
    std::vector<dtensor::bench::Field> p = params;
    p.insert(p.end(), {{"gather", g.name}, {"during", with}});
    dtensor::bench::report("transformer_overlap", p, overlap, "us");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 7;
  dtensor::cli::Flags flags("transformer_fsdp",
                            "Per-device parameter memory and step time of fully_shard, with and "
                            "without reshard_after_forward.");
  std::string trace, which = "fsdp";
  flags.add_int("--rounds", &rounds, "interleaved timing rounds", 1);
  flags.add_int("--layers", &layers, "transformer blocks", 1);
  flags.add_path("--trace", &trace, "chrome-trace JSON of data=8's prefetched step",
                 dtensor::cli::PathKind::kOutputFile);
  flags.add_string("--plans", &which, "fsdp (memory and step of each fsdp plan) or meshes",
                   [](const std::string& v) {
                     return v == "fsdp" || v == "meshes" ? std::string()
                                                         : "must be fsdp or meshes, got " + v;
                   });
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const bool meshes = which == "meshes";
  struct Named {
    std::string mesh, plan;
    std::unique_ptr<Setup> setup;
  };
  std::vector<Named> setups;
  struct Case {
    std::string mesh;
    ParallelPlan plan;
    bool fused = false;
  };
  const ParallelPlan dp = {"data", "", "", false}, three_d = {"data", "model", "seq", true};
  const std::vector<Case> mesh_cases = {{"data=1", {}},
                                        {"data=8", dp},
                                        {"model=8", {"", "model", "", false}},
                                        {"data=2,seq=2,model=2", three_d}};
  const std::vector<Case> fsdp_cases = {
      {"data=1", dp},
      {"data=1", dp, true},
      {"data=8", dp},
      {"data=8", dp, true},
      {"data=8", {"data", "", "", true}},
      {"data=8", {"data", "", "", true, true}},
      {"data=8", {"data", "", "", true, false, true}},
      {"data=8", {"data", "", "", true, true, true}},
      {"data=8", {"data", "", "", true, true, true}, true},
      {"data=2,seq=2,model=2", {"data", "model", "seq", false}},
      {"data=2,seq=2,model=2", three_d},
      {"data=2,seq=2,model=2", three_d, true},
      {"data=2,seq=2,model=2", {"data", "model", "seq", true, true}},
      {"data=2,seq=2,model=2", {"data", "model", "seq", true, true, true}}};
  int64_t replicated = 0;  // resident bytes of the replicated plan on the mesh being run
  for (const auto& [spec, plan, fused] : meshes ? mesh_cases : fsdp_cases) {
    auto s = std::make_unique<Setup>(spec, plan, fused);
    if (meshes) {
      s->step(s->tokens, s->tokens);  // trace
      setups.push_back({spec, plan.to_string(), std::move(s)});
      continue;
    }
    s->model().gather_meter().reset();
    s->eager_step(s->tokens, s->tokens);  // the meter sees every gather
    const int64_t resident = s->resident();
    const std::string plan_name = plan.to_string() + (fused ? " fused_attention" : "");
    const std::vector<dtensor::bench::Field> params = {{"mesh", spec}, {"plan", plan_name}};
    dtensor::bench::report("transformer_resident", params, static_cast<double>(resident), "bytes");
    dtensor::bench::report("transformer_peak", params,
                           static_cast<double>(resident + s->model().gather_meter().peak_bytes()),
                           "bytes");
    if (!plan.fsdp) replicated = resident;
    const int64_t devices = s->mesh().num_devices();
    const int64_t bound =
        replicated / devices + 3 * block_bytes() + (plan.prefetch ? block_bytes() : 0);
    if (plan.fsdp) {
      dtensor::bench::report("transformer_peak_bound", params, static_cast<double>(bound), "bytes");
    }
    s->step(s->tokens, s->tokens);  // trace
    setups.push_back({spec, plan_name, std::move(s)});
  }
  std::vector<std::vector<double>> seconds(setups.size());
  for (int64_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < setups.size(); ++i) {
      Setup& s = *setups[i].setup;
      seconds[i].push_back(dtensor::bench::median_seconds(
          [&s] { dtensor::bench::do_not_optimize(to_global(s.step(s.tokens, s.tokens))); }, 1, 1));
    }
  }
  for (size_t i = 0; i < setups.size(); ++i) {
    std::vector<double>& v = seconds[i];
    std::sort(v.begin(), v.end());
    std::vector<dtensor::bench::Field> params = {{"mesh", setups[i].mesh},
                                                 {"plan", setups[i].plan}};
    if (meshes) params.push_back({"deterministic", int64_t{deterministic_sums() ? 1 : 0}});
    dtensor::bench::report("transformer_step", params, 1e3 * v[v.size() / 2], "ms");
    dtensor::bench::report("transformer_tokens", params,
                           static_cast<double>(kBatch * kContext) / v[v.size() / 2], "tokens/s");
  }
  for (size_t i = 0; i < setups.size(); ++i) {
    Setup& s = *setups[i].setup;
    if (!s.model().plan().prefetch) continue;
    Timeline& timeline = s.model().timeline();
    timeline.clear();
    timeline.enable();
    to_global(s.step(s.tokens, s.tokens));
    timeline.disable();
    report_timeline({{"mesh", setups[i].mesh}, {"plan", setups[i].plan}}, timeline.spans());
    if (!trace.empty() && setups[i].mesh == "data=8" &&
        setups[i].plan == "data=data fsdp reshard_after_forward prefetch") {
      std::ofstream(trace) << timeline.chrome_trace_json();
    }
  }
  return 0;
}
