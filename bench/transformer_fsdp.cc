// fully_shard's memory and step time for examples/transformer's model (2 layers, d=128, 4 heads,
// context 64, batch 16, vocab 96) on data=8 and data=2,seq=2,model=2: per plan (no fsdp, fsdp,
// fsdp with reshard_after_forward), the parameter and Adam-slot bytes device 0 holds
// ("transformer_resident") and their peak during an eager training step, the live gathered
// copies counted by the model's GatherMeter ("transformer_peak"); then the median captured-step
// time of each plan, the plans taking turns for --rounds rounds ("transformer_step").
// --plans=meshes times the step on data=1, data=8, model=8 and data=2,seq=2,model=2 (fsdp)
// instead, without the memory figures; its lines say whether the deterministic mode
// (DTENSOR_DETERMINISTIC=1, read once per process) was on: bench/deterministic_cost.sh runs it
// with the mode off and on in turn.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/expand.h"
#include "ops/ops.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"
#include "train/parallel/transformer.h"

namespace {

using namespace dtensor;
using namespace dtensor::parallel;

constexpr int64_t kBatch = 16, kContext = 64, kVocab = 96;

struct Setup {
  Setup(const std::string& spec, const ParallelPlan& plan)
      : mesh(Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU)),
        model(config(), mesh),
        adam(1e-3),
        tokens(make_tokens(mesh, plan)),
        step(function([this](const std::vector<DTensor>& a) {
          return std::vector<DTensor>{train(a[0], a[1])};
        })) {
    model.parallelize(plan);
    vars = model.variables();
    adam.build(vars);
  }
  static DTensor make_tokens(const Mesh& mesh, const ParallelPlan& plan) {
    Tensor t = Tensor::empty({kBatch, kContext}, DType::kI32);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data<int32_t>()[i] = (i * 7 + i / 5) % 96;
    return distribute(t, plan.data.empty() ? Layout::replicated(mesh, 2)
                                           : Layout::batch_sharded(mesh, plan.data, 2));
  }
  static TransformerConfig config() {
    TransformerConfig c;
    c.vocab = kVocab;
    c.dim = 128;
    c.heads = 4;
    c.layers = 2;
    c.seed = 7;
    return c;
  }
  DTensor train(const DTensor& x, const DTensor& y) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor loss = reduce_mean(lm_loss()(y, model.call(x, true)));
    adam.apply(vars, tape.gradient(loss, vars));
    return loss;
  }
  int64_t resident() const {
    std::vector<DVariable> held = vars;
    for (const auto& [name, slot] : adam.slots()) held.push_back(slot);
    return resident_bytes(held);
  }

  Mesh mesh;
  TransformerLM model;
  Adam adam;
  DTensor tokens;
  std::vector<DVariable> vars;
  Function step;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 7;
  std::string which = "fsdp";
  dtensor::cli::Flags flags("transformer_fsdp",
                            "Per-device parameter memory and step time of fully_shard, with and "
                            "without reshard_after_forward.");
  flags.add_int("--rounds", &rounds, "interleaved timing rounds", 1);
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
  const std::vector<std::pair<std::string, ParallelPlan>> cases =
      meshes
          ? std::vector<std::pair<std::string, ParallelPlan>>{{"data=1", {}},
                                                              {"data=8", {"data", "", "", false}},
                                                              {"model=8", {"", "model", "", false}},
                                                              {"data=2,seq=2,model=2",
                                                               {"data", "model", "seq", true}}}
          : std::vector<std::pair<std::string, ParallelPlan>>{
                {"data=8", {"data", "", "", false}},
                {"data=8", {"data", "", "", true}},
                {"data=8", {"data", "", "", true, true}},
                {"data=2,seq=2,model=2", {"data", "model", "seq", false}},
                {"data=2,seq=2,model=2", {"data", "model", "seq", true}},
                {"data=2,seq=2,model=2", {"data", "model", "seq", true, true}}};
  for (const auto& [spec, plan] : cases) {
    auto s = std::make_unique<Setup>(spec, plan);
    if (meshes) {
      s->step({s->tokens, s->tokens});  // trace
      setups.push_back({spec, plan.to_string(), std::move(s)});
      continue;
    }
    s->model.gather_meter().reset();
    s->train(s->tokens, s->tokens);  // eager: the meter sees every gather
    const int64_t resident = s->resident();
    const std::vector<dtensor::bench::Field> params = {{"mesh", spec}, {"plan", plan.to_string()}};
    dtensor::bench::report("transformer_resident", params, static_cast<double>(resident), "bytes");
    dtensor::bench::report("transformer_peak", params,
                           static_cast<double>(resident + s->model.gather_meter().peak_bytes()),
                           "bytes");
    s->step({s->tokens, s->tokens});  // trace
    setups.push_back({spec, plan.to_string(), std::move(s)});
  }
  std::vector<std::vector<double>> seconds(setups.size());
  for (int64_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < setups.size(); ++i) {
      Setup& s = *setups[i].setup;
      seconds[i].push_back(dtensor::bench::median_seconds(
          [&s] {
            dtensor::bench::do_not_optimize(to_global(s.step({s.tokens, s.tokens})[0]));
          },
          1, 1));
    }
  }
  for (size_t i = 0; i < setups.size(); ++i) {
    std::vector<double>& v = seconds[i];
    std::sort(v.begin(), v.end());
    std::vector<dtensor::bench::Field> params = {{"mesh", setups[i].mesh},
                                                 {"plan", setups[i].plan}};
    if (meshes) params.push_back({"deterministic", int64_t{deterministic_sums() ? 1 : 0}});
    dtensor::bench::report("transformer_step", params, 1e3 * v[v.size() / 2], "ms");
  }
  return 0;
}
