// The Keras guide's MNIST classifier trained asynchronously with a ParameterServerStrategy: one
// coordinator (chief), W workers and P parameter servers, each a process of this program, told
// its task by TF_CONFIG (tools/ps_cluster.sh starts a cluster on this machine):
//
//   tools/ps_cluster.sh /tmp/ps 2 1 -- bazel-bin/examples/ps/train --steps=300
//   bazel-bin/examples/ps/train --sync --steps=300    # the synchronous reference, one process
//   tools/ps_cluster.sh /tmp/ps 2 1 -- bazel-bin/examples/ps/train --data_dir=/path/to/mnist
//
// Data: the IDX files of --data_dir (MNIST or any MNIST-format set, train/data/mnist_dir.h);
// without it Fashion-MNIST from the Debian package dataset-fashion-mnist; when neither is there
// (or with --synthetic), the built-in synthetic digits. Each worker reads the whole training set
// in its own order: worker w shuffles with a seed hashed from (--seed, w), since Dataset::shuffle
// draws epoch e from seed + e and seeds --seed + w made worker 0's epoch e + 1 replay worker 1's
// epoch e.
//
// The chief partitions the model's variables over the servers, schedules --steps train steps
// (each: a worker pulls the variables, computes the gradient of one batch of its own shuffled
// copy of the data and pushes it; the servers apply Adam on arrival), checkpoints every epoch
// into --checkpoint_dir and resumes from the newest checkpoint there. A lost worker's step runs on
// another; a lost server or chief ends every process within seconds, naming the lost task.
// At the end the chief prints the test accuracy, examples/s, the staleness of the pushes and the
// time the workers spent in RPCs against computing.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/flags.h"
#include "dtensor/runtime.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/data/idx.h"
#include "train/data/mnist_dir.h"
#include "train/keras/callbacks.h"
#include "train/keras/layers.h"
#include "train/keras/metrics.h"
#include "train/keras/strategy.h"
#include "train/keras/trainer.h"
#include "train/progress.h"
#include "train/ps/checkpoint.h"
#include "train/ps/coordinator.h"
#include "train/ps/parameter_server.h"
#include "train/ps/worker.h"

namespace {

using namespace dtensor;
using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t steps = 300;
  int64_t batch = 64;
  int64_t steps_per_epoch = 50;
  int64_t shards = 0;
  double lr = 1e-3;
  double lr_decay_alpha = 0.1;
  uint64_t seed = 22;
  std::string data_dir;
  bool synthetic = false;
  int64_t train_examples = -1;
  int64_t test_examples = -1;
  int64_t rejoin_wait_s = 0;
  int64_t join_wait_s = 10;
  int64_t exit_after_push_at_step = 0;
  int64_t exit_after_push_worker = 1;
  std::string checkpoint_dir;
  std::string metrics_out;
  bool sync = false;
};

void define_flags(cli::Flags& cli, Flags& f) {
  cli.add_int("--steps", &f.steps, "train steps in all (each one batch of one worker)", 1);
  cli.add_int("--batch", &f.batch, "examples per step", 1);
  cli.add_int("--steps_per_epoch", &f.steps_per_epoch,
              "steps between checkpoints and progress lines", 1);
  cli.add_int("--shards", &f.shards, "shards per variable (0: one per parameter server)", 0);
  cli.add_double("--lr", &f.lr, "Adam learning rate", /*positive=*/true);
  cli.add_double("--lr_decay_alpha", &f.lr_decay_alpha,
                 "the learning rate decays along a cosine over --steps to this fraction of --lr "
                 "(1: constant), in the synchronous run and on the servers alike",
                 /*positive=*/true);
  cli.add_uint("--seed", &f.seed, "seed of the weights, shuffling and synthetic data");
  cli.add_path("--data_dir", &f.data_dir,
               "folder with MNIST-format IDX files (.gz or raw; only the t10k pair: 5000 train, "
               "5000 test); empty: Fashion-MNIST in " +
                   std::string(data::kFashionMnistDir) + " if it is there, else synthetic digits",
               cli::PathKind::kInputDir);
  cli.add_bool("--synthetic", &f.synthetic, "train on the built-in synthetic digits");
  cli.add_int("--train_examples", &f.train_examples,
              "the first N training examples (-1: all; synthetic digits: 4000)", -1);
  cli.add_int("--test_examples", &f.test_examples,
              "the first N test examples (-1: all; synthetic digits: 1000)", -1);
  cli.add_path("--checkpoint_dir", &f.checkpoint_dir,
               "checkpoints every epoch; the newest is restored at start (empty: none)",
               cli::PathKind::kOutputDir);
  cli.add_path("--metrics_out", &f.metrics_out, "epoch logs, .csv or JSON lines",
               cli::PathKind::kOutputFile);
  cli.add_int("--join_wait_s", &f.join_wait_s,
              "before the first step, wait up to this long for every worker to join (0: do not "
              "wait; steps scheduled meanwhile go to the workers already there)",
              0);
  cli.add_int("--rejoin_wait_s", &f.rejoin_wait_s,
              "at the end, wait up to this long for lost workers to rejoin (0: do not wait)", 0);
  cli.add_int("--exit_after_push_at_step", &f.exit_after_push_at_step,
              "fault injection for tests: worker --exit_after_push_worker ends (_Exit) right after "
              "the servers acknowledged the push of the first step it runs with an id >= N, "
              "before it replies to the chief, which re-runs the step elsewhere (0: never)",
              0);
  cli.add_int("--exit_after_push_worker", &f.exit_after_push_worker,
              "the worker index --exit_after_push_at_step applies to", 0);
  cli.add_bool("--sync", &f.sync, "train synchronously in this process, without a cluster");
}

keras::Sequential make_model(uint64_t seed) {
  return keras::Sequential(
      784, {keras::Dense(256, relu), keras::Dense(256, relu), keras::Dense(10)}, seed);
}

// The mean loss of `batch` and its gradient for each of the model's variables.
struct Gradients {
  double loss = 0;
  std::vector<DTensor> grads;
};

Gradients gradients(keras::Model& model, const data::Batch& batch) {
  static const keras::Loss loss_fn = keras::sparse_categorical_crossentropy();
  const std::vector<DVariable> vars = model.variables();
  GradientTape tape;
  for (const DVariable& v : vars) tape.watch(v);
  const DTensor loss = reduce_mean(loss_fn(batch.labels, model.call(batch.features, true)));
  Gradients out;
  out.grads = tape.gradient(loss, vars);
  out.loss = to_global(loss).data<float>()[0];
  return out;
}

struct Examples {
  std::shared_ptr<const data::ExampleSource> train, test;
  std::string description;
};

// The training and test sets (see the header comment for which).
Examples load_examples(const Flags& f) {
  const std::string dir = !f.data_dir.empty()                             ? f.data_dir
                          : data::has_mnist_files(data::kFashionMnistDir) ? data::kFashionMnistDir
                                                                          : "";
  if (!f.synthetic && !dir.empty()) {
    data::MnistDirSplits files =
        data::open_mnist_dir(dir, f.train_examples, f.test_examples, "train");
    return {files.train, files.test, files.description};
  }
  const data::MnistSplit train =
      data::synthetic_digits(f.train_examples > 0 ? f.train_examples : 4000, f.seed);
  const data::MnistSplit test =
      data::synthetic_digits(f.test_examples > 0 ? f.test_examples : 1000, f.seed + 1);
  return {data::tensor_examples(train.images, train.labels),
          data::tensor_examples(test.images, test.labels), "synthetic digits"};
}

// Worker w's shuffle seed: splitmix64 of (seed, w), so that no two workers' epochs share a
// permutation (seed + w would: epoch e of worker w + 1 is epoch e + 1 of worker w).
uint64_t worker_seed(uint64_t seed, int64_t worker) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(worker) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The training examples, shuffled with `seed`, in batches of `batch`, repeated, on the mesh of
// the calling thread's strategy.
data::Dataset train_dataset(const Flags& f, const Examples& examples, uint64_t seed) {
  data::Dataset d = keras::get_strategy().experimental_distribute_dataset(examples.train);
  d.shuffle(seed).batch(f.batch, /*drop_remainder=*/true).repeat();
  return d;
}

double test_accuracy(keras::Model& model, const Flags& f, const Examples& examples) {
  data::Dataset d = keras::get_strategy().experimental_distribute_dataset(examples.test);
  d.batch(250);
  Adam unused(f.lr);
  keras::Trainer trainer(model, unused, keras::sparse_categorical_crossentropy(),
                         keras::metrics_list<keras::SparseCategoricalAccuracy>());
  return trainer.evaluate(d).at("accuracy");
}

int train_sync(const Flags& f) {
  const Examples examples = load_examples(f);
  keras::Sequential model = make_model(f.seed);
  Adam optimizer(cosine_decay(f.lr, f.steps, f.lr_decay_alpha));
  data::Dataset data = train_dataset(f, examples, f.seed);
  // The mean loss of every --steps_per_epoch steps, as the chief prints it.
  double sum = 0;
  for (int64_t s = 0; s < f.steps; ++s) {
    Gradients g = gradients(model, *data.next());
    optimizer.apply(model.variables(), g.grads);
    sum += g.loss;
    if ((s + 1) % f.steps_per_epoch == 0 || s + 1 == f.steps) {
      fmt::print("step {}/{} loss {:.4f}\n", s + 1, f.steps,
                 sum / static_cast<double>(s % f.steps_per_epoch + 1));
      sum = 0;
    }
  }
  fmt::print("data: {}\nsync: {} steps of {} examples\ntest: accuracy {}\n", examples.description,
             f.steps, f.batch, test_accuracy(model, f, examples));
  return 0;
}

// --exit_after_push_at_step: ends this worker between its acknowledged push and its reply, the
// window in which only the servers' step-id rule keeps a re-run from applying the step twice.
void exit_if_injected(const Flags& f, const ps::WorkerContext& ctx) {
  if (f.exit_after_push_at_step <= 0 || ctx.worker_index() != f.exit_after_push_worker ||
      ctx.step_id() < f.exit_after_push_at_step) {
    return;
  }
  fmt::print("worker:{}: exiting after the push of step {} (--exit_after_push_at_step={})\n",
             ctx.worker_index(), ctx.step_id(), f.exit_after_push_at_step);
  std::fflush(stdout);
  std::_Exit(3);
}

// The workers' functions: "train_step" on the per-worker dataset "train". `examples` must
// outlive the registry.
ps::FunctionRegistry make_registry(const Flags& f, const Examples& examples,
                                   keras::Sequential& model) {
  ps::FunctionRegistry registry;
  registry.add_dataset("train", [f, &examples](const keras::InputContext& ctx) {
    return train_dataset(f, examples, worker_seed(f.seed, ctx.input_pipeline_id()));
  });
  registry.add_function("train_step", [f, &model](ps::WorkerContext& ctx, const std::string&) {
    const std::map<std::string, Tensor> values = ctx.pull();
    const std::vector<DVariable> vars = model.variables();
    for (DVariable v : vars) v.assign(distribute(values.at(v.name()), v.layout()));
    const Gradients g = gradients(model, *ctx.dataset("train").next());
    std::map<std::string, Tensor> grads;
    for (size_t i = 0; i < vars.size(); ++i) grads.emplace(vars[i].name(), to_global(g.grads[i]));
    ctx.push(grads);
    exit_if_injected(f, ctx);
    return fmt::format("{}", g.loss);
  });
  return registry;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Waits up to `seconds` until every worker of the cluster answers the coordinator.
void wait_for_workers(const ps::ClusterCoordinator& coordinator, int64_t seconds) {
  const Clock::time_point end = Clock::now() + std::chrono::seconds(seconds);
  const int64_t workers = coordinator.strategy().num_workers();
  while (coordinator.live_workers() < workers && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int run_chief(const ps::ClusterSpec& spec, const Flags& f) {
  const Examples examples = load_examples(f);
  fmt::print("data: {}\n", examples.description);
  ps::StrategyOptions options;
  options.partitioner = ps::fixed_shards_partitioner(f.shards > 0 ? f.shards : spec.num_ps());
  options.learning_rate = f.lr;
  options.lr_decay_steps = f.steps;
  options.lr_decay_alpha = f.lr_decay_alpha;
  ps::ParameterServerStrategy strategy(spec, options);
  std::optional<keras::Sequential> model;
  {
    auto scope = strategy.scope();
    model.emplace(make_model(f.seed));
  }
  for (const DVariable& v : model->variables()) {
    strategy.create_sharded_variable(to_global(v.value()), v.name());
  }
  int64_t step = 0;
  if (!f.checkpoint_dir.empty()) {
    if (std::optional<int64_t> restored = ps::restore_latest(strategy, f.checkpoint_dir)) {
      step = *restored;
      fmt::print("resumed from {}/ckpt-{}: step {} of {}\n", f.checkpoint_dir, step, step, f.steps);
    }
  }
  ps::ClusterCoordinator coordinator(strategy);
  coordinator.create_per_worker_dataset("train");
  wait_for_workers(coordinator, f.join_wait_s);
  const int64_t epochs = (f.steps + f.steps_per_epoch - 1) / f.steps_per_epoch;
  cli::Progress progress(epochs, true);
  std::optional<keras::MetricsLogger> logger;
  if (!f.metrics_out.empty()) {
    logger.emplace(f.metrics_out, keras::MetricsLogger::Format::kAuto, /*append=*/step > 0);
    logger->on_train_begin({});
  }
  const Clock::time_point start = Clock::now();
  const int64_t first_step = step;
  while (step < f.steps) {
    const int64_t epoch = step / f.steps_per_epoch;
    const int64_t epoch_end = std::min(f.steps, (epoch + 1) * f.steps_per_epoch);
    progress.begin_epoch(epoch, epoch_end - epoch * f.steps_per_epoch,
                         step - epoch * f.steps_per_epoch);
    std::vector<ps::RemoteValue> losses;
    for (int64_t s = step; s < epoch_end; ++s) losses.push_back(coordinator.schedule("train_step"));
    double sum = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      sum += std::stod(losses[i].fetch());
      ++step;
      progress.step(step - epoch * f.steps_per_epoch, {{"loss", sum / static_cast<double>(i + 1)}});
    }
    coordinator.join();
    const double seconds = progress.end_epoch({{"loss", sum / static_cast<double>(losses.size())}});
    fmt::print("step {}/{} loss {:.4f}\n", step, f.steps, sum / static_cast<double>(losses.size()));
    std::fflush(stdout);
    if (!f.checkpoint_dir.empty()) ps::save_checkpoint(strategy, f.checkpoint_dir, step);
    if (logger) {
      keras::Logs row{{"loss", sum / static_cast<double>(losses.size())},
                      {"step", static_cast<double>(step)},
                      {"examples_per_s", static_cast<double>(losses.size() * f.batch) / seconds}};
      logger->on_epoch_end(epoch, row);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // A worker restarted late gets a bounded time to rejoin, so that it is told the job finished.
  wait_for_workers(coordinator, f.rejoin_wait_s);
  const std::map<std::string, Tensor> values = strategy.read_variables();
  for (DVariable v : model->variables()) v.assign(distribute(values.at(v.name()), v.layout()));
  double accuracy = 0;
  {
    auto scope = strategy.scope();
    accuracy = test_accuracy(*model, f, examples);
  }
  const ps::CoordinatorStats stats = coordinator.stats();
  std::vector<double> staleness;
  for (int64_t s : strategy.staleness()) staleness.push_back(static_cast<double>(s));
  const double max_staleness =
      staleness.empty() ? 0 : *std::max_element(staleness.begin(), staleness.end());
  const double done = static_cast<double>(std::max<int64_t>(stats.functions_done, 1));
  fmt::print("trained {} steps in this run ({} workers, {} servers): {:.1f} examples/s\n",
             step - first_step, spec.num_workers(), spec.num_ps(),
             static_cast<double>((step - first_step) * f.batch) / seconds);
  fmt::print("staleness (server steps between a worker's pull and its push): median {} max {}\n",
             median(staleness), max_staleness);
  fmt::print("per step: rpc {:.3f} ms, compute {:.3f} ms; re-run steps {}, workers lost {}\n",
             1e3 * stats.rpc_seconds / done, 1e3 * stats.compute_seconds / done, stats.reruns,
             stats.workers_lost);
  // Exactly once: every server applied each step of this run once (re-runs' pushes dropped).
  std::string applied;
  for (const ps::ParameterServerStrategy::PushCounts& c : strategy.push_counts()) {
    applied += fmt::format("{}{}", applied.empty() ? "" : " ", c.applied_steps);
  }
  fmt::print("steps applied per server: {} of {} scheduled; duplicate pushes dropped {}\n", applied,
             step - first_step, stats.duplicate_pushes);
  fmt::print("test: accuracy {}\n", accuracy);
  std::fflush(stdout);
  ps::shutdown_tasks(spec, "finished");
  return 0;
}

int run_task(const Flags& f) {
  const ps::ClusterSpec spec = ps::ClusterSpec::from_environment();
  const std::string me = spec.task().str();
  try {
    std::string reason;
    if (spec.task().type == ps::TaskType::kChief) return run_chief(spec, f);
    if (spec.task().type == ps::TaskType::kPs) {
      reason = ps::run_parameter_server(spec);
    } else {
      const Examples examples = load_examples(f);
      keras::Sequential model = make_model(f.seed);
      const ps::FunctionRegistry registry = make_registry(f, examples, model);
      reason = ps::run_worker(spec, registry);
    }
    fmt::print("{}: shut down by chief:0: {}\n", me, reason);
    return reason == "finished" ? 0 : 1;
  } catch (const Error& e) {
    fmt::print(stderr, "{}: {}\n", me, e.what());
    std::fflush(stderr);
    if (spec.task().type == ps::TaskType::kChief) {
      ps::shutdown_tasks(spec, std::string("chief:0 ended: ") + e.what());
      return 1;
    }
    // A worker or server that lost a task ends now: no gRPC handler still blocked on the lost
    // task (a step's pull, say) may keep the process alive past the 15 s the job promises.
    std::fflush(stdout);
    std::_Exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return dtensor::run_main(argc, argv, [&](dtensor::Runtime&) {
    Flags flags;
    dtensor::cli::Flags cli("train",
                            "The Keras guide's MNIST model trained asynchronously with a "
                            "ParameterServerStrategy (TF_CONFIG names this process's task).");
    define_flags(cli, flags);
    if (std::optional<int> code = cli.parse(argc, argv, true)) return *code;
    return flags.sync ? train_sync(flags) : run_task(flags);
  });
}
