// Median training-step time (forward, backward, Adam) of the seed MLP (784-700-500-10) at global
// batch 128, for the meshes batch=1, batch=8 and batch=2,model=4, each run eagerly and as a
// captured step (dtensor::function: traced once, replayed); then the same step written by hand
// against OpenBLAS ("mesh":"plain", bench/plain_mlp.h), the floor the machine gives that
// arithmetic. Then the peak memory of one step of each setup ("train_step_memory": the peak
// resident set over the resting one, the buffer pool emptied first). The setups take turns, a few
// steps each per round with the last one timed (its weights warm in cache, as in a training loop),
// so that a machine whose speed drifts moves all of them alike and their ratios hold. batch=1 and
// batch=8 also run under the mixed_bfloat16 policy (ops/precision.h: bf16 products, f32 weights,
// gradients and Adam), "precision" in each line; --precision picks one policy.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "bench/peak_memory.h"
#include "bench/plain_mlp.h"
#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "examples/mnist/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"

namespace {

using namespace dtensor;

// One data-parallel or tensor-parallel training setup of the seed MLP.
struct RuntimeStep {
  RuntimeStep(const std::string& spec, const Policy& policy)
      : policy(policy),
        mesh(Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU)),
        model(mesh, {784, 700, 500, 10}, 22),
        vars(model.variables()),
        optimizer(1e-3),
        x(random_uniform({128, 784}, model.batch_layout(2), 1)),
        labels(cast(scale(random_uniform({128}, model.batch_layout(1), 2), 9.99), DType::kI32)),
        captured(function([this](const std::vector<DTensor>& args) {
          return std::vector<DTensor>{loss_and_update(args[0], args[1])};
        })) {}

  // Eager steps and the trace of the captured one run under the setup's policy.
  DTensor loss_and_update(const DTensor& images, const DTensor& y) {
    PolicyScope scope(policy);
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(images), y));
    optimizer.apply(vars, tape.gradient(loss, vars));
    return loss;
  }

  Policy policy;
  Mesh mesh;
  examples::Mlp model;
  std::vector<DVariable> vars;
  Adam optimizer;
  DTensor x, labels;
  Function captured;
};

}  // namespace

// With --setup, only that setup (for profiling): train_step --setup=batch=8, --setup=plain; with
// --mode, only the eager or the captured step (perf record -e cpu-clock ... --mode=captured).
int main(int argc, char** argv) {
  std::string only;
  dtensor::cli::Flags flags("train_step",
                            "Median training-step time of the MNIST MLP per mesh, next to the "
                            "same step written by hand against OpenBLAS.");
  flags.add_string(
      "--setup", &only,
      "time only this setup (eager and captured): batch=1, batch=8, batch=2,model=4 or plain",
      [](const std::string& s) -> std::string {
        if (s == "batch=1" || s == "batch=8" || s == "batch=2,model=4" || s == "plain") {
          return "";
        }
        return "unknown setup '" + s + "' (known: batch=1, batch=8, batch=2,model=4, plain)";
      });
  std::string precision;
  flags.add_string("--precision", &precision,
                   "time only this policy: float32 or mixed_bfloat16 (default: both)",
                   [](const std::string& p) -> std::string {
                     return p == "float32" || p == "mixed_bfloat16"
                                ? ""
                                : "unknown precision '" + p + "' (float32 or mixed_bfloat16)";
                   });
  std::string mode;
  flags.add_string("--mode", &mode, "time only this mode: eager or captured (default: both)",
                   [](const std::string& m) -> std::string {
                     return m == "eager" || m == "captured"
                                ? ""
                                : "unknown mode '" + m + "' (eager or captured)";
                   });
  int64_t rounds = 40;
  flags.add_int("--rounds", &rounds, "timed rounds (default 40; more under a profiler)",
                /*min=*/1, /*max=*/100000);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  // (mesh, mode, precision, step)
  struct Setup {
    std::string mesh, mode, precision;
    std::function<void()> step;
  };
  std::vector<Setup> steps;
  for (const Policy& policy : {Policy::float32(), Policy::mixed_bfloat16()}) {
    if (!precision.empty() && precision != policy.name()) continue;
    for (const char* spec : {"batch=1", "batch=8", "batch=2,model=4"}) {
      if (!only.empty() && only != spec) continue;
      if (policy != Policy::float32() && std::string(spec) == "batch=2,model=4") continue;
      if (mode != "captured") {
        auto eager = std::make_shared<RuntimeStep>(spec, policy);
        steps.push_back({spec, "eager", policy.name(),
                         [eager] { eager->loss_and_update(eager->x, eager->labels); }});
      }
      if (mode != "eager") {
        auto captured = std::make_shared<RuntimeStep>(spec, policy);
        steps.push_back(
            {spec, "captured", policy.name(), [captured] {
               bench::do_not_optimize(captured->captured({captured->x, captured->labels}));
             }});
      }
    }
  }
  std::mt19937 rng(1);
  std::vector<float> images(128 * 784);
  std::vector<int32_t> labels(128);
  for (float& v : images) v = std::uniform_real_distribution<float>(0, 1)(rng);
  for (int32_t& v : labels) v = static_cast<int32_t>(rng() % 10);
  auto plain = std::make_shared<bench::PlainMlp>(std::vector<int>{784, 700, 500, 10}, 128);
  if ((only.empty() || only == "plain") && (precision.empty() || precision == "float32") &&
      mode.empty()) {
    steps.push_back(
        {"plain", "plain", "float32", [=] { plain->step(images.data(), labels.data()); }});
  }
  constexpr int kWarmup = 2, kStepsPerTurn = 3;
  const int timed_rounds = static_cast<int>(rounds);
  std::vector<std::vector<double>> times(steps.size());
  for (int round = 0; round < kWarmup + timed_rounds; ++round) {
    for (size_t s = 0; s < steps.size(); ++s) {
      for (int i = 1; i < kStepsPerTurn; ++i) steps[s].step();
      auto start = std::chrono::steady_clock::now();
      steps[s].step();
      std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      if (round >= kWarmup) times[s].push_back(took.count());
    }
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<double>& t = times[s];
    std::nth_element(t.begin(), t.begin() + timed_rounds / 2, t.end());
    bench::report("train_step",
                  {{"mesh", steps[s].mesh},
                   {"mode", steps[s].mode},
                   {"precision", steps[s].precision},
                   {"batch", int64_t{128}}},
                  t[timed_rounds / 2] * 1e3, "ms/step");
  }
  for (const Setup& setup : steps) {
    bench::report("train_step_memory",
                  {{"mesh", setup.mesh},
                   {"mode", setup.mode},
                   {"precision", setup.precision},
                   {"batch", int64_t{128}}},
                  dtensor::bench::step_peak_bytes(setup.step) / 1e6, "MB peak over resting");
  }
}
