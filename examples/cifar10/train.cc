// TensorFlow's CIFAR-10 multi-GPU tutorial (cifar10_multi_gpu_train.py) in C++: the tutorial's CNN
// trained as towers, one per device of the mesh's first dim, each on its slice of the batch, the
// gradients averaged every step; SGD with a staircase exponential decay, L2 weight decay on the
// dense layers, and evaluation with the exponential moving averages of the weights.
//
//   tools/bazel run //examples/cifar10:train                            # synthetic set, batch=8
//   tools/bazel run //examples/cifar10:train -- --data_dir=/path/to/cifar-10-batches-bin
//   tools/bazel run //examples/cifar10:train -- --dataset=fashion_mnist --epochs=5
//   tools/bazel run --config=cuda //examples/cifar10:train -- --device=gpu   # logical GPUs
//
// Every --log_every steps it prints the tutorial's line
//   step N, loss = X (E examples/sec; S sec/batch)
// (the total loss of step N; throughput and seconds per global batch averaged over the steps since
// the previous line), and after each epoch the test accuracy with the averaged weights. Flags:
// `--help` lists them with their defaults.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/precision_flag.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "examples/cifar10/data.h"
#include "dtensor/host_copy.h"
#include "examples/cifar10/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "train/checkpoint/checkpoint.h"
#include "train/data/dataset.h"
#include "train/optim/ema.h"
#include "train/optim/optimizers.h"
#include "train/optim/weight_decay.h"

namespace {

using namespace dtensor;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string dataset = "cifar10";
  std::string precision = "float32";
  std::string data_dir;
  int64_t train_limit = -1;
  int64_t test_limit = -1;
  std::string mesh = "batch=8";
  std::string device = "cpu";
  int64_t epochs = 2;
  int64_t batch_size = 128;
  double lr = 0.1;
  double decay_epochs = 350;
  double decay_factor = 0.1;
  double weight_decay = 0.004;
  double ema_decay = 0.9999;
  uint64_t seed = 1;
  int64_t log_every = 10;
  std::string metrics_out;
  std::string checkpoint_dir;
};

// A single mesh dim: the towers.
std::string check_mesh(const std::string& text) {
  std::vector<MeshDim> dims;
  try {
    dims = parse_mesh_dims(text);
  } catch (const Error& e) {
    return e.what();
  }
  if (dims.size() != 1 || dims[0].name != "batch") {
    return "expected one mesh dim 'batch' (the towers), got '" + text + "'";
  }
  return "";
}

std::string check_dataset(const std::string& name) {
  if (name == "cifar10" || name == "fashion_mnist") return "";
  return "expected cifar10 or fashion_mnist, got '" + name + "'";
}

void define_flags(cli::Flags& cli, Flags& f) {
  cli.add_string("--dataset", &f.dataset,
                 "cifar10 (CIFAR-10 binaries in --data_dir; none: a synthetic set) or "
                 "fashion_mnist (IDX files; default folder " +
                     std::string(examples::kFashionMnistDir) + ")",
                 check_dataset);
  cli.add_path("--data_dir", &f.data_dir,
               "folder of the dataset's files (cifar-10-batches-bin for cifar10)",
               cli::PathKind::kInputDir);
  cli.add_int("--train_limit", &f.train_limit,
              "use only the first N training examples (-1: all; synthetic: 2048)", -1);
  cli.add_int("--test_limit", &f.test_limit,
              "use only the first N test examples (-1: all; synthetic: 512)", -1);
  cli.add_string("--mesh", &f.mesh, "mesh dims: batch=N, one tower per device", check_mesh);
  cli.add_string("--device", &f.device,
                 "cpu or gpu: the towers' device type; gpu runs them as logical devices of the "
                 "visible GPUs (a --config=cuda build), the batches assembled on the host",
                 [](const std::string& d) {
                   return d == "cpu" || d == "gpu" ? "" : "expected cpu or gpu, got '" + d + "'";
                 });
  cli.add_int("--epochs", &f.epochs, "epochs to train", 1);
  cli.add_int("--batch_size", &f.batch_size, "global batch size (split over the towers)", 1);
  cli.add_double("--lr", &f.lr, "initial SGD learning rate", /*positive=*/true);
  cli.add_double("--decay_epochs", &f.decay_epochs,
                 "epochs between learning-rate decays (staircase)", /*positive=*/true);
  cli.add_double("--decay_factor", &f.decay_factor, "learning-rate decay factor",
                 /*positive=*/true);
  cli.add_double("--weight_decay", &f.weight_decay, "L2 weight decay of the dense 384/192 weights");
  cli.add_double("--ema_decay", &f.ema_decay,
                 "moving-average decay of the weights evaluated (0: evaluate the raw weights)");
  cli.add_uint("--seed", &f.seed,
               "seed of the weights, shuffling, augmentation and synthetic data");
  cli.add_int("--log_every", &f.log_every, "print the step line every N steps", 1);
  cli.add_path("--metrics_out", &f.metrics_out,
               "JSON lines file, one object per epoch (train loss, test accuracy, examples/sec)",
               cli::PathKind::kOutputFile);
  cli.add_path("--checkpoint_dir", &f.checkpoint_dir,
               "folder for a checkpoint after every epoch; the newest is restored at start",
               cli::PathKind::kOutputDir);
}

std::string number(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

// The ranges cli::Flags has no option for, reported like its errors.
std::optional<std::string> check_ranges(const Flags& f) {
  if (f.weight_decay < 0) {
    return "--weight_decay: must be at least 0, got " + number(f.weight_decay);
  }
  if (f.ema_decay < 0 || f.ema_decay > 1) {
    return "--ema_decay: must be in [0, 1], got " + number(f.ema_decay);
  }
  return std::nullopt;
}

// A scalar result read on the host (copied back from a GPU mesh).
double scalar(const DTensor& x) { return host_readable(to_global(x)).data<float>()[0]; }

// The batch's features and labels moved from the host mesh they were assembled on to the
// towers' mesh (the same dims and layouts), shard by shard; unchanged on a CPU mesh.
data::Batch onto(data::Batch batch, const Mesh& mesh) {
  if (mesh.device_type() == DeviceType::kCPU) return batch;
  for (DTensor* t : {&batch.features, &batch.labels}) {
    const std::vector<int64_t> ids = mesh.local_device_ids();
    std::vector<Tensor> shards;
    shards.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      shards.push_back(on_device(t->shards()[i], mesh_device(mesh, ids[i])));
    }
    *t = DTensor(t->shape(), t->dtype(), Layout(t->layout().sharding_specs(), mesh),
                 std::move(shards));
  }
  return batch;
}

struct TestMetrics {
  double loss = 0, accuracy = 0;
};

TestMetrics evaluate(const examples::Cifar10Cnn& model, data::Dataset& test, const Mesh& mesh) {
  test.restore({0, 0});
  double loss = 0, correct = 0;
  int64_t seen = 0;
  while (std::optional<data::Batch> next = test.next()) {
    const std::optional<data::Batch> batch = onto(*next, mesh);
    DTensor logits = model(batch->features);
    loss += scalar(reduce_sum(sparse_softmax_cross_entropy(logits, batch->labels)));
    correct += scalar(
        reduce_sum(cast(equal(cast(argmax(logits, 1), DType::kI32), batch->labels), DType::kF32)));
    seen += batch->size;
  }
  const double n = static_cast<double>(std::max<int64_t>(seen, 1));
  return {loss / n, correct / n};
}

int run(int argc, char** argv, const Runtime& rt) {
  Flags f;
  cli::Flags cli("train",
                 "Trains the CNN of TensorFlow's CIFAR-10 tutorial as towers over a mesh of "
                 "virtual CPU devices (or logical GPUs).");
  define_flags(cli, f);
  cli::add_precision_flag(cli, &f.precision);
  if (std::optional<int> code = cli.parse(argc, argv, rt.process_index() == 0)) return *code;
  // conv2d and matmul traced and run on this thread follow the policy (ops/precision.h).
  const PolicyScope policy(Policy::from_name(f.precision));
  if (std::optional<std::string> bad = check_ranges(f)) {
    if (rt.process_index() == 0) std::fprintf(stderr, "train: %s\n", bad->c_str());
    return 2;
  }
  std::vector<MeshDim> dims = parse_mesh_dims(f.mesh);
  if (dims[0].size % rt.num_processes() != 0) {
    throw_error<InvalidArgumentError>("train",
                                      "mesh {} has {} devices, not divisible by {} processes",
                                      f.mesh, dims[0].size, rt.num_processes());
  }
  configure_virtual_cpus(dims[0].size / rt.num_processes());
  // The towers' mesh; the datasets assemble batches on a host mesh of the same dims.
  Mesh mesh = create_mesh(dims, f.device == "gpu" ? DeviceType::kGPU : DeviceType::kCPU);
  const Mesh host_mesh = f.device == "gpu" ? create_mesh(dims) : mesh;
  const bool reporter = rt.process_index() == 0;

  examples::Splits data =
      examples::load_splits({f.dataset, f.data_dir, f.train_limit, f.test_limit, f.seed});
  data::Dataset train(data.train, host_mesh, "batch");
  train.augment(data.train_augmentation);
  train.cache().shuffle(f.seed).batch(f.batch_size).repeat(f.epochs).prefetch(2);
  data::Dataset test(data.test, host_mesh, "batch");
  test.augment(data.test_augmentation);
  test.cache().batch(f.batch_size).repeat(1);
  const int64_t steps_per_epoch = train.batches_per_epoch();
  if (reporter) {
    std::printf("data: %s, %lld train / %lld test examples; mesh %s; batch %lld; %lld epochs\n",
                data.description.c_str(), static_cast<long long>(train.num_examples()),
                static_cast<long long>(test.num_examples()), mesh.dims_string().c_str(),
                static_cast<long long>(f.batch_size), static_cast<long long>(f.epochs));
  }

  examples::Cifar10Cnn model(mesh, data.image_shape, data.classes, f.seed);
  std::vector<DVariable> vars = model.variables();
  const auto decay_steps = std::max<int64_t>(
      1, static_cast<int64_t>(f.decay_epochs * static_cast<double>(steps_per_epoch)));
  const Schedule schedule =
      exponential_decay(f.lr, decay_steps, f.decay_factor, /*staircase=*/true);
  SGD optimizer(schedule);
  optimizer.build(vars);
  std::optional<ExponentialMovingAverage> ema;
  if (f.ema_decay > 0) {
    ema.emplace(f.ema_decay);
    ema->track(vars);
  }

  // Resume: the whole training state, restored into this run's mesh whatever the saving run's.
  int64_t epochs_done = 0;
  Checkpoint checkpoint;
  std::optional<CheckpointManager> manager;
  if (!f.checkpoint_dir.empty()) {
    checkpoint.add_variables("model", vars);
    checkpoint.add_optimizer("sgd", optimizer, vars);
    if (ema) ema->track_in(checkpoint, "ema");
    checkpoint.add_dataset("train", train);
    checkpoint.add_int("epochs_done", &epochs_done);
    manager.emplace(checkpoint, f.checkpoint_dir, /*max_to_keep=*/2);
    if (std::optional<int64_t> step = manager->restore_latest(); step && reporter) {
      std::printf("resumed from %s/ckpt-%lld: %lld epochs done\n", f.checkpoint_dir.c_str(),
                  static_cast<long long>(*step), static_cast<long long>(epochs_done));
    }
  }

  std::ofstream metrics;
  if (reporter && !f.metrics_out.empty()) {
    metrics.open(f.metrics_out, epochs_done > 0 ? std::ios::app : std::ios::trunc);
    metrics.precision(9);
  }
  const std::vector<DVariable> decayed = model.decayed_variables();
  for (int64_t epoch = epochs_done; epoch < f.epochs; ++epoch) {
    double loss_sum = 0;
    int64_t seen = 0;
    double train_seconds = 0;
    Clock::time_point log_start = Clock::now();
    int64_t log_steps = 0, log_examples = 0;
    // Checkpoints are taken between epochs: every epoch runs from its first batch.
    for (int64_t b = 0; b < steps_per_epoch; ++b) {
      const Clock::time_point start = Clock::now();
      const std::optional<data::Batch> batch = onto(*train.next(), mesh);
      GradientTape tape;
      for (const DVariable& v : vars) tape.watch(v);
      DTensor logits = model(batch->features);
      DTensor loss = reduce_mean(sparse_softmax_cross_entropy(logits, batch->labels));
      if (f.weight_decay > 0) loss = add(loss, weight_decay_loss(decayed, f.weight_decay));
      std::vector<DTensor> grads = tape.gradient(loss, vars);
      optimizer.apply(vars, grads);
      if (ema) ema->apply(vars);
      const double step_loss = scalar(loss);
      train_seconds += std::chrono::duration<double>(Clock::now() - start).count();
      loss_sum += step_loss * static_cast<double>(batch->size);
      seen += batch->size;
      ++log_steps;
      log_examples += batch->size;
      if (reporter && optimizer.step() % f.log_every == 0) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - log_start).count();
        std::printf("step %lld, loss = %.2f (%.1f examples/sec; %.3f sec/batch)\n",
                    static_cast<long long>(optimizer.step()), step_loss,
                    static_cast<double>(log_examples) / std::max(elapsed, 1e-9),
                    elapsed / static_cast<double>(log_steps));
        std::fflush(stdout);
        log_start = Clock::now();
        log_steps = log_examples = 0;
      }
    }
    TestMetrics te;
    {
      std::optional<ExponentialMovingAverage::Swap> averaged;
      if (ema) averaged.emplace(ema->swap_in(vars));
      te = evaluate(model, test, mesh);
    }
    const double train_loss = loss_sum / static_cast<double>(std::max<int64_t>(seen, 1));
    const double examples_per_s = static_cast<double>(seen) / std::max(train_seconds, 1e-9);
    if (reporter) {
      std::printf(
          "epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f%s, "
          "%.1f examples/sec\n",
          static_cast<long long>(epoch + 1), train_loss, te.loss, te.accuracy,
          ema ? " (moving averages)" : "", examples_per_s);
      std::fflush(stdout);
    }
    if (metrics.is_open()) {
      metrics << "{\"epoch\":" << epoch + 1 << ",\"step\":" << optimizer.step()
              << ",\"train_loss\":" << train_loss << ",\"test_loss\":" << te.loss
              << ",\"test_acc\":" << te.accuracy << ",\"lr\":" << schedule(optimizer.step() - 1)
              << ",\"wall_s\":" << train_seconds << ",\"examples_per_s\":" << examples_per_s
              << "}\n";
      metrics.flush();
    }
    epochs_done = epoch + 1;
    if (manager) manager->save(optimizer.step());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [&](Runtime& rt) { return run(argc, argv, rt); });
}
