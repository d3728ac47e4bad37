// The elementwise glue of the mixed_bfloat16 seed step, alone: captured steps that replay the
// step's f32 -> bf16 casts (of the input batch, of an activation) and its relu-grad chain alone,
// ending in the cast (one fused segment), and with the cast kept apart, at the seed MLP's shapes
// (batch 128; 784 and 700 features) on batch=8 (8 shards of 16 rows) and batch=1 (one shard). The
// setups take turns within each round; each figure is the median over rounds of the mean replay
// time.
#include <algorithm>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/ops.h"
#include "train/capture/function.h"

namespace {

using namespace dtensor;

struct Setup {
  std::string name;
  int64_t devices;
  Function step;
  std::vector<DTensor> arguments;
  std::vector<double> seconds;  // per round: mean seconds per replay
};

}  // namespace

int main(int argc, char** argv) {
  cli::Flags flags("mixed_glue",
                   "Casts and relu-grad segments of the mixed_bfloat16 seed step, captured. "
                   "Prints one JSON object per measurement.");
  int64_t rounds = 31, replays = 50;
  flags.add_int("--rounds", &rounds, "interleaved rounds", 1, 10000);
  flags.add_int("--replays", &replays, "replays of each setup per round", 1, 100000);
  std::string only;
  flags.add_string("--only", &only, "run only the setups of this name (default: all)");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;

  std::vector<Setup> setups;
  for (int64_t devices : {8, 1}) {
    Mesh mesh = Mesh::create({{"batch", devices}}, DeviceType::kCPU);
    const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
    const DTensor x = random_uniform({128, 784}, rows, 1, 0.0, 1.0);
    const DTensor g = random_uniform({128, 700}, rows, 2, -1.0, 1.0);
    const DTensor y = random_uniform({128, 700}, rows, 3, -1.0, 1.0);
    auto add = [&](const std::string& name, Step step, std::vector<DTensor> arguments) {
      if (!only.empty() && name != only) return;
      setups.push_back({name, devices, function(std::move(step)), std::move(arguments), {}});
    };
    add("cast_input",
        [](const std::vector<DTensor>& a) {
          return std::vector<DTensor>{cast(a[0], DType::kBF16)};
        },
        {x});
    add("cast_activation",
        [](const std::vector<DTensor>& a) {
          return std::vector<DTensor>{cast(a[0], DType::kBF16)};
        },
        {y});
    // As dense's VJP under mixed_bfloat16: g * relu'(y) in f32 (kept for the bias gradient),
    // then cast to bf16 for both products. relu stands in for the internal relu_grad.
    add("relu_grad",
        [](const std::vector<DTensor>& a) { return std::vector<DTensor>{mul(a[0], relu(a[1]))}; },
        {g, y});
    add("relu_grad_cast",
        [](const std::vector<DTensor>& a) {
          DTensor gz = mul(a[0], relu(a[1]));
          return std::vector<DTensor>{gz, cast(gz, DType::kBF16)};
        },
        {g, y});
    // The same with the cast in a segment of its own: a scale of a scalar (never fused) between.
    add("relu_grad_then_cast",
        [](const std::vector<DTensor>& a) {
          DTensor gz = mul(a[0], relu(a[1]));
          DTensor apart = scale(a[2], 2.0);
          return std::vector<DTensor>{gz, cast(gz, DType::kBF16), apart};
        },
        {g, y, fill({}, Layout::replicated(mesh, 0), 1.0)});
  }
  for (Setup& s : setups) s.step(s.arguments);  // traces
  for (int64_t r = 0; r < rounds; ++r) {
    for (Setup& s : setups) {
      const double t = bench::median_seconds(
          [&] {
            for (int64_t i = 0; i < replays; ++i) bench::do_not_optimize(s.step(s.arguments));
          },
          1, r == 0 ? 2 : 0);
      s.seconds.push_back(t / static_cast<double>(replays));
    }
  }
  for (Setup& s : setups) {
    std::sort(s.seconds.begin(), s.seconds.end());
    bench::report("mixed_glue",
                  {{"setup", s.name},
                   {"devices", s.devices},
                   {"fused_calls", static_cast<int64_t>(s.step.fused_calls(s.arguments))}},
                  s.seconds[s.seconds.size() / 2] * 1e6, "us/replay");
  }
}
