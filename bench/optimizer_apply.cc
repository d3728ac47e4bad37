// Optimizer::apply alone, as a replayed step runs it (in place, every variable refreshing its bf16
// copy under mixed_bfloat16): the seed MLP's variables (784-700-500-10, 903,810 parameters)
// replicated on a batch=8 mesh of virtual CPU devices. Between two timed applies the bench streams
// over --evict_mb MB of other memory on the pool's threads, as the step's products and
// activations do, so that the update's data is about as cold as in the step (0: hot) and the
// pool's worker has gone idle as it has after the step's last product (--gap_us).
//
//   optimizer_apply --optimizer=adam --precision=mixed_bfloat16 --evict_mb=24 --rounds=400
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "dtensor/variable.h"
#include "runtime/thread_pool.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"

using namespace dtensor;

namespace {

std::unique_ptr<Optimizer> make_optimizer(const std::string& name) {
  if (name == "adam") return std::make_unique<Adam>(1e-3);
  if (name == "sgd") return std::make_unique<SGD>(1e-3);
  return std::make_unique<SGD>(1e-3, 0.9);  // "momentum"
}

// Reads and writes every cache line of `junk` on the pool's threads.
void stream_over(std::vector<float>& junk) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t parts = pool.num_threads();
  const int64_t n = static_cast<int64_t>(junk.size());
  pool.parallel_for(parts, [&](int64_t p) {
    for (int64_t i = n * p / parts; i < n * (p + 1) / parts; i += 16) junk[i] += 1.0f;
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::string optimizer = "adam", precision = "mixed_bfloat16";
  int64_t evict_mb = 24, gap_us = 50, rounds = 400;
  cli::Flags flags("optimizer_apply",
                   "Median time of one in-place Optimizer::apply of a replayed step over the "
                   "seed MLP's variables, with the cache state set by --evict_mb.");
  flags.add_string("--optimizer", &optimizer, "adam, sgd or momentum",
                   [](const std::string& s) -> std::string {
                     return s == "adam" || s == "sgd" || s == "momentum"
                                ? ""
                                : "unknown optimizer '" + s + "' (adam, sgd or momentum)";
                   });
  flags.add_string("--precision", &precision,
                   "float32, or mixed_bfloat16 (each variable keeps a bf16 copy that the update "
                   "refreshes)",
                   [](const std::string& s) -> std::string {
                     return s == "float32" || s == "mixed_bfloat16"
                                ? ""
                                : "unknown precision '" + s + "' (float32 or mixed_bfloat16)";
                   });
  flags.add_int("--evict_mb", &evict_mb, "MB of other memory streamed over between applies",
                /*min=*/0, /*max=*/1024);
  flags.add_int("--gap_us", &gap_us,
                "microseconds the calling thread works alone before each apply (the step's small "
                "ops after its last product), long enough for the pool's worker to go to sleep",
                /*min=*/0, /*max=*/100000);
  flags.add_int("--rounds", &rounds, "timed applies", /*min=*/1, /*max=*/100000);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;

  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  const std::vector<Shape> shapes = {{784, 700}, {700}, {700, 500}, {500}, {500, 10}, {10}};
  std::vector<DVariable> vars;
  std::vector<DTensor> grads;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Layout layout = Layout::replicated(mesh, static_cast<int64_t>(shapes[i].size()));
    vars.emplace_back(random_uniform(shapes[i], layout, 10 + i, -0.05, 0.05),
                      "v" + std::to_string(i));
    grads.push_back(random_uniform(shapes[i], layout, 20 + i, -1e-3, 1e-3));
    if (precision == "mixed_bfloat16") DVariable::copy_of(vars.back().value(), DType::kBF16);
  }
  std::unique_ptr<Optimizer> opt = make_optimizer(optimizer);
  Function apply = function([&](const std::vector<DTensor>& g) {
    opt->apply(vars, g);
    return std::vector<DTensor>{};
  });
  std::vector<float> junk(static_cast<size_t>(evict_mb) << 18);
  std::vector<double> times;
  for (int64_t r = 0; r < rounds + 3; ++r) {
    stream_over(junk);
    const auto gap_end = std::chrono::steady_clock::now() + std::chrono::microseconds(gap_us);
    while (std::chrono::steady_clock::now() < gap_end) {
    }
    const auto start = std::chrono::steady_clock::now();
    apply(grads);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (r >= 3) times.push_back(took.count());
  }
  // The median, and the tenth percentile: on a host shared with other machines the low quantile
  // shows a change more steadily.
  std::sort(times.begin(), times.end());
  for (const auto& [name, q] : {std::pair<const char*, double>{"optimizer_apply", 0.5},
                                std::pair<const char*, double>{"optimizer_apply_p10", 0.1}}) {
    bench::report(name,
                  {{"optimizer", optimizer},
                   {"precision", precision},
                   {"evict_mb", evict_mb},
                   {"gap_us", gap_us},
                   {"params", int64_t{903810}}},
                  times[static_cast<size_t>(static_cast<double>(rounds) * q)] * 1e6, "us/apply");
  }
}
