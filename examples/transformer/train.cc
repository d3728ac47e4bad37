// A character-level decoder-only language model (parallel::TransformerLM) trained on the English
// of Debian's `fortunes` package (/usr/share/games/fortunes) over a mesh of virtual CPU devices:
//
//   tools/bazel run //examples/transformer:train                        # data=2,seq=2,model=2
//   tools/bazel run //examples/transformer:train -- --mesh=model=8
//   tools/bazel run //examples/transformer:train -- --mesh=data=8 --resume=/tmp/lm  # another mesh
//   tools/bazel run //examples/transformer:train -- --plot=/tmp/lm.png   # loss per step
//
// The mesh's dims name the parallelism (train/parallel/plan.h): `data` (batch; with --fsdp the
// weights and Adam's slots are stored sharded over it too), `model` (tensor parallel: heads, MLP,
// vocab), `seq` (sequence parallel). The last 10% of the text is held out; the run reports the
// held-out loss every --eval_every steps and at the end, against --loss_bound.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "cli/flags.h"
#include "cli/plot.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/capture/function.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optim/optimizers.h"
#include "train/parallel/transformer.h"
#include "train/progress.h"

namespace {

using namespace dtensor;

struct Flags {
  std::string text_dir = "/usr/share/games/fortunes";
  std::string mesh = "data=2,seq=2,model=2";
  bool fsdp = true, reshard_after_forward = false, prefetch = false, fused_attention = false;
  int64_t steps = 600, batch = 16, context = 64, layers = 2, dim = 128, heads = 4;
  int64_t eval_every = 100, eval_batches = 8;
  double lr = 2e-3, dropout = 0.1, loss_bound = 2.3;
  uint64_t seed = 7;
  std::string checkpoint, resume, plot, loss_log;
};

// Printable ASCII and newline: 96 tokens (anything else reads as a space).
constexpr int64_t kVocab = 96;
int32_t token_of(unsigned char c) {
  if (c == '\n') return 95;
  return c >= 32 && c < 127 ? c - 32 : 0;
}

// The text of every plain fortune file in `dir` (not the .dat indexes nor the .u8 links), in name
// order, as tokens.
std::vector<int32_t> read_text(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(dir)) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") {
        files.push_back(e.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<int32_t> tokens;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    for (unsigned char c : s.str()) tokens.push_back(token_of(c));
  }
  if (tokens.size() < 100000) {
    throw_error<InvalidArgumentError>(
        "train", "found {} characters of text under {}: install Debian's `fortunes` package",
        tokens.size(), dir);
  }
  return tokens;
}

// Windows of context + 1 tokens from [begin, end) of the text, at positions drawn from (seed,
// step): inputs and next-token labels [batch, context].
std::pair<Tensor, Tensor> batch_at(const std::vector<int32_t>& text, size_t begin, size_t end,
                                   int64_t batch, int64_t context, uint64_t seed, int64_t step) {
  Tensor x = Tensor::empty({batch, context}, DType::kI32);
  Tensor y = Tensor::empty({batch, context}, DType::kI32);
  uint64_t state =
      seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) * 0xBF58476D1CE4E5B9ull;
  for (int64_t b = 0; b < batch; ++b) {
    state ^= state >> 31;
    state *= 0x94D049BB133111EBull;
    state ^= state >> 29;
    const size_t start = begin + state % (end - begin - static_cast<size_t>(context) - 1);
    for (int64_t t = 0; t < context; ++t) {
      x.data<int32_t>()[b * context + t] = text[start + t];
      y.data<int32_t>()[b * context + t] = text[start + t + 1];
    }
  }
  return {x, y};
}

// The sum of |w| over every element of every weight, in a fixed order, in f64: one bit of any
// weight changes it (runs that must agree bit for bit compare it).
double weights_digest(const std::vector<DVariable>& vars) {
  double sum = 0;
  for (const DVariable& v : vars) {
    const Tensor t = to_global(v.value());
    for (int64_t i = 0; i < t.num_elements(); ++i) sum += std::fabs(t.data<float>()[i]);
  }
  return sum;
}

parallel::ParallelPlan plan_for(const Mesh& mesh, const Flags& f) {
  parallel::ParallelPlan plan;
  if (mesh.has_dim("data")) plan.data = "data";
  if (mesh.has_dim("model")) plan.model = "model";
  if (mesh.has_dim("seq")) plan.seq = "seq";
  plan.fsdp = f.fsdp && !plan.data.empty();
  plan.reshard_after_forward = plan.fsdp && f.reshard_after_forward;
  plan.prefetch = plan.fsdp && f.prefetch;
  return plan;
}

std::string check_mesh(const std::string& text) {
  try {
    for (const MeshDim& d : parse_mesh_dims(text)) {
      if (d.name != "data" && d.name != "model" && d.name != "seq") {
        return "unknown mesh dim '" + d.name + "' in '" + text + "' (known: data, model, seq)";
      }
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int run(int argc, char** argv, const Runtime& rt) {
  Flags f;
  cli::Flags cli("train", "Trains a character-level transformer LM over a mesh of virtual CPUs.");
  cli.add_path("--text_dir", &f.text_dir, "folder of fortune files (Debian's `fortunes`)",
               cli::PathKind::kInputDir);
  cli.add_string("--mesh", &f.mesh, "mesh dims among data, seq, model (any factorisation)",
                 check_mesh);
  cli.add_bool("--fsdp", &f.fsdp, "store weights and Adam slots sharded over data");
  cli.add_bool("--reshard_after_forward", &f.reshard_after_forward,
               "with --fsdp: drop gathered weights after forward, gather them again for backward");
  cli.add_bool("--prefetch", &f.prefetch,
               "with --fsdp: gather the next block's weights on a thread while this one computes");
  cli.add_bool("--fused_attention", &f.fused_attention,
               "attention through the fused kernel (no score matrix; gathers the sequence)");
  cli.add_int("--steps", &f.steps, "training steps (in all, counting resumed ones)", 1);
  cli.add_int("--batch", &f.batch, "global batch (sequences)", 1);
  cli.add_int("--context", &f.context, "tokens per sequence", 2);
  cli.add_int("--layers", &f.layers, "transformer blocks", 1);
  cli.add_int("--dim", &f.dim, "model width", 2);
  cli.add_int("--heads", &f.heads, "attention heads", 1);
  cli.add_int("--eval_every", &f.eval_every, "held-out loss every N steps", 1);
  cli.add_int("--eval_batches", &f.eval_batches, "held-out batches per evaluation", 1);
  cli.add_double("--lr", &f.lr, "Adam learning rate", /*positive=*/true);
  cli.add_double("--dropout", &f.dropout, "dropout rate on the residual branches", false);
  cli.add_double("--loss_bound", &f.loss_bound, "the held-out loss the run must reach", true);
  cli.add_uint("--seed", &f.seed, "seed of the weights, batches and dropout");
  cli.add_path("--checkpoint", &f.checkpoint, "save the training state here at every evaluation",
               cli::PathKind::kOutputDir);
  cli.add_path("--resume", &f.resume, "restore the training state from here first (any mesh)",
               cli::PathKind::kInputDir);
  cli.add_path("--plot", &f.plot, "PNG of the train and held-out loss per step",
               cli::PathKind::kOutputFile);
  cli.add_path("--loss_log", &f.loss_log,
               "write every step's training loss here, one line each: step, bits (%a), value; "
               "then 'weights', the bits and value of the sum of |w| over every weight",
               cli::PathKind::kOutputFile);
  if (std::optional<int> code = cli.parse(argc, argv, rt.process_index() == 0)) return *code;

  std::vector<MeshDim> dims = parse_mesh_dims(f.mesh);
  int64_t devices = 1;
  for (const MeshDim& d : dims) devices *= d.size;
  configure_virtual_cpus(devices / rt.num_processes());
  const Mesh mesh = create_mesh(dims);
  const bool reporter = rt.process_index() == 0;

  const std::vector<int32_t> text = read_text(f.text_dir);
  const size_t split = text.size() * 9 / 10;
  parallel::TransformerConfig config;
  config.vocab = kVocab;
  config.dim = f.dim;
  config.heads = f.heads;
  config.layers = f.layers;
  config.dropout = f.dropout;
  config.seed = f.seed;
  config.fused_attention = f.fused_attention;
  parallel::TransformerLM model(config, mesh);
  model.parallelize(plan_for(mesh, f));
  if (reporter) {
    fmt::print("text: {} ({} characters, {} held out); model {}; mesh {}; plan {}\n", f.text_dir,
               text.size(), text.size() - split, config.to_string(), mesh.dims_string(),
               model.plan().to_string());
  }

  Adam adam(f.lr);
  const std::vector<DVariable> vars = model.variables();
  adam.build(vars);
  int64_t step = 0;
  Checkpoint state;
  state.add_variables("", vars);
  state.add_optimizer("adam", adam);
  state.add_variable("dropout_seed", model.seeds().state());
  state.add_int("step", &step);
  if (!f.resume.empty()) {
    state.restore(f.resume);
    if (reporter) fmt::print("resumed at step {} from {}\n", step, f.resume);
  }

  Function train_step = function([&](const std::vector<DTensor>& a) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor loss = reduce_mean(parallel::lm_loss()(a[1], model.call(a[0], true)));
    adam.apply(vars, tape.gradient(loss, vars));
    return std::vector<DTensor>{loss};
  });
  Function eval_step = function([&](const std::vector<DTensor>& a) {
    return std::vector<DTensor>{reduce_mean(parallel::lm_loss()(a[1], model.call(a[0], false)))};
  });
  const Layout rows =
      mesh.has_dim("data") ? Layout::batch_sharded(mesh, "data", 2) : Layout::replicated(mesh, 2);
  auto on_mesh = [&](const std::pair<Tensor, Tensor>& b) {
    return std::vector<DTensor>{distribute(b.first, rows), distribute(b.second, rows)};
  };
  auto held_out_loss = [&] {
    double sum = 0;
    for (int64_t i = 0; i < f.eval_batches; ++i) {
      auto b = batch_at(text, split, text.size(), f.batch, f.context, f.seed + 1, i);
      sum += to_global(eval_step(on_mesh(b))[0]).data<float>()[0];
    }
    return sum / static_cast<double>(f.eval_batches);
  };

  std::ofstream loss_log;
  if (reporter && !f.loss_log.empty()) loss_log.open(f.loss_log);
  cli::Progress progress(1, reporter);
  progress.begin_epoch(0, f.steps, step);
  double loss = 0, held_out = 0;
  cli::Series train_curve{"train", {}, {}}, held_out_curve{"held-out", {}, {}};
  const auto start = std::chrono::steady_clock::now();
  const int64_t first = step;
  for (; step < f.steps;) {
    std::vector<DTensor> batch =
        on_mesh(batch_at(text, 0, split, f.batch, f.context, f.seed, step));
    loss = to_global(train_step(batch)[0]).data<float>()[0];
    if (step == first && reporter) {
      fmt::print("\ncollectives per step:\n{}", train_step.collective_summary(batch).to_string());
    }
    ++step;
    train_curve.values.push_back(loss);
    train_curve.x.push_back(static_cast<double>(step));
    if (loss_log.is_open()) {
      loss_log << fmt::format("{} {:a} {:.9g}\n", step, static_cast<float>(loss), loss)
               << std::flush;
    }
    if (step % f.eval_every == 0 || step == f.steps) {
      held_out = held_out_loss();
      held_out_curve.values.push_back(held_out);
      held_out_curve.x.push_back(static_cast<double>(step));
      if (!f.checkpoint.empty()) state.save(f.checkpoint);
    }
    progress.step(step, {{"loss", loss}, {"val_loss", held_out}});
  }
  progress.end_epoch({{"loss", loss}, {"val_loss", held_out}});
  if (!f.loss_log.empty()) {
    const double digest = weights_digest(vars);  // every process: to_global gathers
    if (loss_log.is_open()) loss_log << fmt::format("weights {:a} {:.17g}\n", digest, digest);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens = static_cast<double>((step - first) * f.batch * f.context);
  if (reporter) {
    fmt::print(
        "final: step {} loss {:.4f} held-out loss {:.4f} (bound {:.2f}: {}); {:.0f} "
        "tokens/s; loss bits {:a}\n",
        step, loss, held_out, f.loss_bound, held_out <= f.loss_bound ? "reached" : "MISSED",
        seconds > 0 ? tokens / seconds : 0.0, static_cast<float>(loss));
    std::string curve;
    for (size_t i = 0; i < held_out_curve.values.size(); ++i) {
      curve += fmt::format(" {}:{:.4f}", held_out_curve.x[i], held_out_curve.values[i]);
    }
    fmt::print("held-out loss by step:{}\n", curve);
    if (!f.plot.empty()) {
      cli::Panel panel{"Character-level LM loss",
                       "cross-entropy (nats/char)",
                       {train_curve, held_out_curve},
                       0.0,
                       std::nullopt};
      panel.x_label = "step";
      cli::write_training_plot(f.plot, {panel});
      fmt::print("plot: {}\n", f.plot);
    }
  }
  return held_out <= f.loss_bound ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  return dtensor::run_main(argc, argv, [&](dtensor::Runtime& rt) { return run(argc, argv, rt); });
}
