// The Keras distributed-training guide in C++: an MLP classifier on MNIST-style digits, built in a
// MirroredStrategy's scope, trained with fit on every replica, checkpointed every epoch and
// resumed after a crash.
//
//   tools/bazel run //examples/keras:train -- --checkpoint_dir=/tmp/ckpt --crash_after_steps=40
//   tools/bazel run //examples/keras:train -- --checkpoint_dir=/tmp/ckpt   # resumes, finishes
//
// The first command is killed mid-training (it exits with status 3 after 40 steps, in epoch 2 of
// 29 steps each, like a lost machine); the second finds the newest checkpoint in --checkpoint_dir
// (epoch 1's) and continues from it.
// Its final weights are bit for bit those of a run that was never interrupted: compare the
// "weights fnv1a64" line. Running the finished job once more trains nothing.
//
// The train step runs captured (dtensor::function: traced once, replayed after, to the same
// bits); --eager runs it op by op. Each epoch prints the median step time.
//
// Flags: `--help` lists them with their defaults; relative paths are taken from where `bazel run`
// was started. Under mpirun --replicas is the total over all processes. --strategy picks the
// tf.distribute strategy (mirrored by default; see strategies_test.sh).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/precision_flag.h"
#include "cli/tensorboard.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "train/data/idx.h"
#include "train/data/mnist_dir.h"
#include "train/keras/checkpoint_callbacks.h"
#include "train/keras/layers.h"
#include "train/keras/strategy.h"
#include "train/keras/trainer.h"
#include "train/progress.h"

namespace {

using namespace dtensor;

struct Flags {
  int64_t replicas = 8;
  int64_t epochs = 3;
  int64_t per_replica_batch = 16;
  double lr = 1e-3;
  uint64_t seed = 22;
  std::string checkpoint_dir = "/tmp/dtensor_keras_ckpt";
  int64_t save_every_steps = 0;
  int64_t keep = 3;
  int64_t crash_after_steps = 0;
  int64_t train_examples = 4000;
  std::string data_dir;
  std::string metrics_out;
  std::string tensorboard_dir;
  bool eager = false;
  std::string strategy = "mirrored";
  std::string precision = "float32";
};

void define_flags(cli::Flags& cli, Flags& f) {
  cli.add_int("--replicas", &f.replicas,
              "devices of the mesh replica=N, over all processes (split evenly among them)", 1);
  cli.add_int("--epochs", &f.epochs, "epochs to train", 1);
  cli.add_int("--per_replica_batch", &f.per_replica_batch,
              "examples per replica per step (global batch: this times --replicas)", 1);
  cli.add_double("--lr", &f.lr, "Adam learning rate", /*positive=*/true);
  cli.add_uint("--seed", &f.seed, "seed of the weights, shuffling and synthetic data");
  cli.add_path("--checkpoint_dir", &f.checkpoint_dir,
               "folder of the numbered checkpoints; the newest is restored at start",
               cli::PathKind::kOutputDir);
  cli.add_int("--save_every_steps", &f.save_every_steps, "save every N steps (0: every epoch)", 0);
  cli.add_int("--keep", &f.keep, "checkpoints kept", 1);
  cli.add_int("--crash_after_steps", &f.crash_after_steps,
              "exit with status 3 after N steps of this process, as a lost machine (0: never)", 0);
  cli.add_int("--train_examples", &f.train_examples,
              "training examples (a tenth held out for validation)", 10);
  cli.add_path("--data_dir", &f.data_dir,
               "folder with the MNIST IDX files (.gz or raw); only the t10k pair: 5000 train, "
               "5000 test; empty: synthetic digits",
               cli::PathKind::kInputDir);
  cli.add_path("--metrics_out", &f.metrics_out, "epoch logs, .csv or JSON lines",
               cli::PathKind::kOutputFile);
  cli.add_bool("--eager", &f.eager,
               "run the train step op by op instead of as a captured (traced, replayed) step");
  cli.add_string("--strategy", &f.strategy,
                 "mirrored, multi_worker_mirrored, central_storage (one process) or one_device "
                 "(one process, --replicas=1)",
                 [](const std::string& v) -> std::string {
                   if (v == "mirrored" || v == "multi_worker_mirrored" || v == "central_storage" ||
                       v == "one_device") {
                     return "";
                   }
                   return "unknown strategy '" + v + "'";
                 });
  cli.add_path("--tensorboard_dir", &f.tensorboard_dir,
               "folder for TensorBoard event files (the epoch logs as scalars)",
               cli::PathKind::kOutputDir);
}

std::string mnist_file(const std::string& dir, const std::string& name) {
  std::string path = data::find_idx_file(dir, name);
  if (path.empty()) throw_error<IoError>("train", "no {}[.gz] in '{}'", name, dir);
  return path;
}

// Train, validation and test splits: the guide holds out 10000 training examples for validation;
// here a tenth of the training examples (at least one global batch's worth).
struct Splits {
  data::MnistSplit train, val, test;
};

Splits load(const Flags& f) {
  data::MnistSplit train, test;
  if (f.data_dir.empty()) {
    train = data::synthetic_digits(f.train_examples, f.seed);
    test = data::synthetic_digits(1000, f.seed + 1);
  } else {
    const std::string test_images = mnist_file(f.data_dir, "t10k-images-idx3-ubyte");
    const std::string test_labels = mnist_file(f.data_dir, "t10k-labels-idx1-ubyte");
    const std::string train_images = data::find_idx_file(f.data_dir, "train-images-idx3-ubyte");
    const std::string train_labels = data::find_idx_file(f.data_dir, "train-labels-idx1-ubyte");
    if (!train_images.empty() && !train_labels.empty()) {
      train = data::load_mnist(train_images, train_labels, 0, f.train_examples);
      test = data::load_mnist(test_images, test_labels);
    } else {
      // Only the test set, as in the MNIST example: its first half trains, its second half tests.
      train =
          data::load_mnist(test_images, test_labels, 0, std::min<int64_t>(f.train_examples, 5000));
      test = data::load_mnist(test_images, test_labels, 5000, 5000);
    }
  }
  const int64_t n = train.labels.dim(0), held_out = n / 10;
  auto rows = [](const Tensor& t, int64_t begin, int64_t end) {
    Shape shape = t.shape();
    shape[0] = end - begin;
    Tensor out = Tensor::empty(shape, t.dtype());
    const size_t row = t.nbytes() / static_cast<size_t>(t.dim(0));
    std::memcpy(out.raw_data(), static_cast<const char*>(t.raw_data()) + begin * row, out.nbytes());
    return out;
  };
  Splits s;
  s.train = {rows(train.images, 0, n - held_out), rows(train.labels, 0, n - held_out)};
  s.val = {rows(train.images, n - held_out, n), rows(train.labels, n - held_out, n)};
  s.test = test;
  return s;
}

// FNV-1a over the bytes of every weight: equal checksums mean bit-identical weights.
uint64_t checksum(const std::vector<DVariable>& vars) {
  uint64_t h = 1469598103934665603ull;
  for (const DVariable& v : vars) {
    Tensor t = to_global(v.value());
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// The strategy --strategy names, with --replicas replicas over all processes.
std::unique_ptr<keras::Strategy> make_strategy(const Runtime& rt, const Flags& f) {
  const int64_t per_process = f.replicas / rt.num_processes();
  if (f.strategy == "multi_worker_mirrored") {
    return std::make_unique<keras::MultiWorkerMirroredStrategy>(per_process);
  }
  if (f.strategy == "central_storage" || f.strategy == "one_device") {
    if (rt.num_processes() != 1) {
      throw_error<InvalidArgumentError>("train", "--strategy={} runs in one process, not {}",
                                        f.strategy, rt.num_processes());
    }
    if (f.strategy == "one_device") {
      if (f.replicas != 1) {
        throw_error<InvalidArgumentError>("train", "--strategy=one_device needs --replicas=1");
      }
      return std::make_unique<keras::OneDeviceStrategy>();
    }
    return std::make_unique<keras::CentralStorageStrategy>(f.replicas);
  }
  return std::make_unique<keras::MirroredStrategy>();
}

int train(Runtime& rt, const Flags& f) {
  if (f.replicas < 1 || f.replicas % rt.num_processes() != 0) {
    throw_error<InvalidArgumentError>("train",
                                      "--replicas={} must be a positive multiple of the {} "
                                      "processes",
                                      f.replicas, rt.num_processes());
  }
  configure_virtual_cpus(f.replicas / rt.num_processes());
  const bool main_process = rt.process_index() == 0;

  // Create the strategy: by default a MirroredStrategy over every device.
  std::unique_ptr<keras::Strategy> chosen = make_strategy(rt, f);
  const keras::Strategy& strategy = *chosen;
  if (main_process) fmt::print("Number of devices: {}\n", strategy.num_replicas_in_sync());

  // Open a strategy scope: everything that creates variables goes in it.
  std::optional<keras::Sequential> model;
  {
    auto scope = strategy.scope();
    model.emplace(784,
                  std::vector<keras::Dense>{keras::Dense(256, relu), keras::Dense(256, relu),
                                            keras::Dense(10)},
                  f.seed);
  }
  Adam optimizer(f.lr);
  keras::Trainer trainer(*model, optimizer, keras::sparse_categorical_crossentropy(),
                         keras::metrics_list<keras::SparseCategoricalAccuracy>());
  trainer.set_run_eagerly(f.eager);

  // Datasets of global batches, each replica getting its slice.
  Splits splits = load(f);
  const int64_t global_batch = f.per_replica_batch * strategy.num_replicas_in_sync();
  data::Dataset train_data = strategy.distribute_dataset(splits.train.images, splits.train.labels);
  train_data.shuffle(f.seed).batch(global_batch).repeat().prefetch(2);
  data::Dataset val_data = strategy.distribute_dataset(splits.val.images, splits.val.labels);
  val_data.batch(global_batch);
  data::Dataset test_data = strategy.distribute_dataset(splits.test.images, splits.test.labels);
  test_data.batch(global_batch);
  if (main_process) {
    fmt::print("{} train / {} validation / {} test examples; global batch {}\n",
               train_data.num_examples(), val_data.num_examples(), test_data.num_examples(),
               global_batch);
  }

  // Checkpoint the whole training state every epoch; restore the newest one on start.
  const keras::SaveFreq freq = f.save_every_steps > 0 ? keras::SaveFreq::steps(f.save_every_steps)
                                                      : keras::SaveFreq::epoch();
  keras::BackupAndRestore checkpoints(f.checkpoint_dir, freq, f.keep, /*delete_checkpoint=*/false);
  std::optional<keras::MetricsLogger> logger;
  if (!f.metrics_out.empty()) logger.emplace(f.metrics_out);
  int64_t steps_here = 0;
  keras::LambdaCallback crash;  // and progress notes
  crash.batch_end = [&](int64_t, const keras::Logs&) {
    if (++steps_here == f.crash_after_steps) {
      fmt::print("simulated crash after {} steps (global step {})\n", steps_here,
                 crash.trainer().counters().global_step);
      std::fflush(stdout);
      std::_Exit(3);  // no unwinding, no clean-up: as if the machine went away
    }
  };
  bool announced = false;
  crash.epoch_begin = [&](int64_t epoch, const keras::Logs&) {
    if (announced || !main_process || !checkpoints.restored_step()) return;
    announced = true;
    fmt::print("resumed from {}/ckpt-{}: epoch {}, step {} of it\n", f.checkpoint_dir,
               *checkpoints.restored_step(), epoch + 1, trainer.counters().step_in_epoch);
  };
  // The progress display shared with the MNIST example (redrawn only on a real terminal).
  cli::Progress progress(f.epochs, main_process);
  keras::LambdaCallback display;
  auto metrics_of = [](const keras::Logs& logs) {
    cli::Metrics m;
    for (const char* name : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
      if (auto it = logs.find(name); it != logs.end()) m.emplace_back(name, it->second);
    }
    return m;
  };
  display.epoch_begin = [&](int64_t epoch, const keras::Logs&) {
    progress.begin_epoch(epoch, trainer.params().steps_per_epoch, trainer.counters().step_in_epoch);
  };
  display.batch_end = [&](int64_t batch, const keras::Logs& logs) {
    progress.step(batch + 1, metrics_of(logs));
  };
  std::optional<cli::EventWriter> events;
  if (main_process && !f.tensorboard_dir.empty()) events.emplace(f.tensorboard_dir);
  double epoch_seconds = 0;
  int64_t epoch_first_step = 0;
  display.epoch_begin = [&, begin = display.epoch_begin](int64_t epoch, const keras::Logs& logs) {
    epoch_first_step = trainer.counters().step_in_epoch;
    begin(epoch, logs);
  };
  // The median time of a train step (batch begin to end) per epoch.
  std::vector<double> step_ms;
  std::chrono::steady_clock::time_point step_start;
  display.batch_begin = [&](int64_t, const keras::Logs&) {
    step_start = std::chrono::steady_clock::now();
  };
  display.batch_end = [&, end = display.batch_end](int64_t batch, const keras::Logs& logs) {
    step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start)
            .count());
    end(batch, logs);
  };
  display.epoch_end = [&](int64_t epoch, const keras::Logs& logs) {
    epoch_seconds = progress.end_epoch(metrics_of(logs));
    if (main_process && !step_ms.empty()) {
      std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
      fmt::print("step time: median {:.3f} ms per step ({})\n", step_ms[step_ms.size() / 2],
                 f.eager ? "eager" : "captured");
      std::fflush(stdout);
    }
    step_ms.clear();
    if (events) {
      for (const auto& [name, value] : logs) events->scalar("epoch_" + name, value, epoch + 1);
    }
  };
  keras::FitOptions options;
  options.epochs = f.epochs;
  options.validation_data = &val_data;
  options.callbacks = {&checkpoints, &crash, &display};
  if (logger) {
    // Runs after `display`, which timed the epoch.
    logger->add_fields = [&](int64_t, keras::Logs& row) {
      const int64_t steps = trainer.params().steps_per_epoch - epoch_first_step;
      row["step"] = static_cast<double>(trainer.counters().global_step);
      row["lr"] = f.lr;
      row["wall_s"] = epoch_seconds;
      row["examples_per_s"] =
          epoch_seconds > 0 ? static_cast<double>(steps * global_batch) / epoch_seconds : 0;
    };
    options.callbacks.push_back(&*logger);
  }
  options.verbose = keras::Verbosity::kSilent;

  keras::History history = trainer.fit(train_data, options);
  if (main_process) {
    if (checkpoints.restored_step() && !announced) {
      fmt::print("restored {}/ckpt-{}: training was complete\n", f.checkpoint_dir,
                 *checkpoints.restored_step());
    }
    fmt::print("trained {} epochs in this run; global step {}\n", history.epochs.size(),
               trainer.counters().global_step);
  }
  keras::Logs test = trainer.evaluate(test_data);
  const uint64_t sum = checksum(model->variables());
  if (main_process) {
    fmt::print("test: loss {} accuracy {}\n", test.at("loss"), test.at("accuracy"));
    fmt::print("weights fnv1a64: {:016x}\n", sum);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return dtensor::run_main(argc, argv, [&](dtensor::Runtime& rt) {
    Flags flags;
    dtensor::cli::Flags cli("train",
                            "The Keras distributed-training guide: a tf.distribute strategy, fit, "
                            "checkpoints and resume.");
    define_flags(cli, flags);
    dtensor::cli::add_precision_flag(cli, &flags.precision);
    if (std::optional<int> code = cli.parse(argc, argv, rt.process_index() == 0)) return *code;
    // Layers called on this thread follow the policy (ops/precision.h).
    const dtensor::PolicyScope policy(dtensor::Policy::from_name(flags.precision));
    return train(rt, flags);
  });
}
