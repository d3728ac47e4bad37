// The seed experiment: an MLP (784-700-500-10) trained with Adam on MNIST over a mesh of virtual
// CPU devices, printing training and test loss and accuracy per epoch (TF DTensor's DTensor ML
// tutorial, in C++).
//
//   tools/bazel run //examples/mnist:train                          # synthetic digits, batch=8
//   tools/bazel run //examples/mnist:train -- --data_dir=/path/to/mnist --plot=/tmp/m.png
//   tools/bazel run //examples/mnist:train -- --mesh=batch=2,model=4
//   tools/bazel run --config=cuda //examples/mnist:train -- --device=gpu   # logical GPUs
//
// The training step is captured (dtensor::function: traced on its first call, replayed after,
// to the same bits); --eager runs it op by op instead. Each epoch prints the median step time.
//
// Flags: `--help` lists them with their defaults. With --data_dir, the four standard MNIST files
// (gz or raw) are read; when only the t10k files are there, examples [0, 5000) train and
// [5000, 10000) test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "cli/flags.h"
#include "cli/plot.h"
#include "cli/precision_flag.h"
#include "cli/tensorboard.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "examples/mnist/model.h"
#include "kernels/gpu/gpu_kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "train/capture/function.h"
#include "train/data/dataset.h"
#include "train/data/idx.h"
#include "train/data/mnist_dir.h"
#include "train/optim/optimizers.h"
#include "train/progress.h"

namespace {

using namespace dtensor;

struct Flags {
  std::string data_dir;
  int64_t train_limit = -1;
  int64_t test_limit = -1;
  std::string mesh = "batch=8";
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 22;
  std::string metrics_out;
  std::string plot;
  std::string tensorboard_dir;
  bool eager = false;
  std::string device = "cpu";
  std::string precision = "float32";
};

// "batch=8" or "batch=2,model=4": the first dim shards the batch, a `model` dim the hidden layers.
std::string check_mesh(const std::string& text) {
  std::vector<MeshDim> dims;
  try {
    dims = parse_mesh_dims(text);
  } catch (const Error& e) {
    return e.what();
  }
  if (dims.empty() || dims[0].name != "batch") {
    return "the first mesh dim must be 'batch', got '" + text + "'";
  }
  for (const MeshDim& d : dims) {
    if (d.name != "batch" && d.name != "model") {
      return "unknown mesh dim '" + d.name + "' in '" + text + "' (known: batch, model)";
    }
  }
  return "";
}

void define_flags(cli::Flags& cli, Flags& f) {
  cli.add_path("--data_dir", &f.data_dir,
               "folder with the MNIST IDX files (.gz or raw); only the t10k pair: 5000 train, "
               "5000 test; empty: synthetic digits",
               cli::PathKind::kInputDir);
  cli.add_int("--train_limit", &f.train_limit, "use only the first N training examples (-1: all)",
              -1);
  cli.add_int("--test_limit", &f.test_limit, "use only the first N test examples (-1: all)", -1);
  cli.add_string("--mesh", &f.mesh, "mesh dims: batch=N, optionally model=M", check_mesh);
  cli.add_int("--epochs", &f.epochs, "epochs to train", 1);
  cli.add_int("--batch_size", &f.batch_size, "global batch size", 1);
  cli.add_double("--lr", &f.lr, "Adam learning rate", /*positive=*/true);
  cli.add_uint("--seed", &f.seed, "seed of the weights, shuffling and synthetic data");
  cli.add_path("--metrics_out", &f.metrics_out, "JSON lines file, one object per epoch",
               cli::PathKind::kOutputFile);
  cli.add_path("--plot", &f.plot, "PNG of loss and accuracy per epoch, train and test",
               cli::PathKind::kOutputFile);
  cli.add_string("--device", &f.device,
                 "cpu or gpu: the mesh's device type; gpu runs its devices as logical devices of "
                 "the visible GPUs (a --config=cuda build)",
                 [](const std::string& d) {
                   return d == "cpu" || d == "gpu" ? "" : "expected cpu or gpu, got '" + d + "'";
                 });
  cli.add_path("--tensorboard_dir", &f.tensorboard_dir,
               "folder for TensorBoard event files (loss and accuracy scalars per epoch)",
               cli::PathKind::kOutputDir);
  cli.add_bool("--eager", &f.eager,
               "run the training step op by op instead of as a captured (traced, replayed) step");
  cli::add_precision_flag(cli, &f.precision);
}

struct Splits {
  std::shared_ptr<const data::ExampleSource> train, test;
  std::string source;
};

Splits load(const Flags& f) {
  if (f.data_dir.empty()) {
    int64_t n_train = f.train_limit > 0 ? f.train_limit : 5000;
    int64_t n_test = f.test_limit > 0 ? f.test_limit : 1000;
    data::MnistSplit train = data::synthetic_digits(n_train, f.seed);
    data::MnistSplit test = data::synthetic_digits(n_test, f.seed + 1);
    return {data::tensor_examples(train.images, train.labels),
            data::tensor_examples(test.images, test.labels), "synthetic digits"};
  }
  data::MnistDirSplits files =
      data::open_mnist_dir(f.data_dir, f.train_limit, f.test_limit, "train");
  return {files.train, files.test, files.description};
}

struct EpochMetrics {
  double loss = 0, accuracy = 0;
};

// --device=gpu: batches are assembled on a host mesh of the same dims and their shards copied to
// the GPU mesh's devices each step; scalars come back to the host to be reported.
DTensor on_mesh(const DTensor& x, const Mesh& mesh) {
  if (mesh.device_type() == DeviceType::kCPU) return x;
  std::vector<Tensor> shards;
  for (size_t i = 0; i < x.shards().size(); ++i) {
    shards.push_back(
        kernels::gpu::copy_to_gpu(x.shards()[i], mesh_device(mesh, mesh.local_device_ids()[i])));
  }
  return DTensor(x.shape(), x.dtype(), Layout(x.layout().sharding_specs(), mesh),
                 std::move(shards));
}

float host_scalar(const DTensor& x) {
  Tensor t = to_global(x);
  if (t.device().type != DeviceType::kCPU) t = kernels::gpu::copy_to_host(t);
  return t.data<float>()[0];
}

// Sum of per-example losses and of correct predictions in one batch, as scalar DTensors.
std::vector<DTensor> batch_sum_tensors(const DTensor& logits, const DTensor& labels) {
  DTensor loss = reduce_sum(sparse_softmax_cross_entropy(logits, labels));
  DTensor correct =
      reduce_sum(cast(equal(cast(argmax(logits, 1), DType::kI32), labels), DType::kF32));
  return {loss, correct};
}

std::pair<double, double> read_sums(const std::vector<DTensor>& sums) {
  return {host_scalar(sums[0]), host_scalar(sums[1])};
}

std::pair<double, double> batch_sums(const DTensor& logits, const DTensor& labels) {
  return read_sums(batch_sum_tensors(logits, labels));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv, const Runtime& rt) {
  Flags flags;
  cli::Flags cli("train", "Trains an MLP on MNIST over a mesh of virtual CPU devices.");
  define_flags(cli, flags);
  if (std::optional<int> code = cli.parse(argc, argv, rt.process_index() == 0)) return *code;
  // Ops traced and run on this thread from here on follow the policy (ops/precision.h).
  const PolicyScope policy(Policy::from_name(flags.precision));
  std::vector<MeshDim> dims = parse_mesh_dims(flags.mesh);
  int64_t devices = 1;
  for (const MeshDim& d : dims) devices *= d.size;
  if (devices % rt.num_processes() != 0) {
    throw_error<InvalidArgumentError>("train",
                                      "mesh {} has {} devices, not divisible by {} processes",
                                      flags.mesh, devices, rt.num_processes());
  }
  // Each process runs its block of the mesh: under `mpirun -np 2`, batch=8 is 4 devices each.
  configure_virtual_cpus(devices / rt.num_processes());
  Mesh mesh = create_mesh(dims, flags.device == "gpu" ? DeviceType::kGPU : DeviceType::kCPU);
  const Mesh host_mesh = flags.device == "gpu" ? create_mesh(dims) : mesh;
  // Every process computes the same global metrics; the first one reports them.
  const bool reporter = rt.process_index() == 0;
  const std::string batch_dim = dims[0].name;
  Splits data = load(flags);
  if (reporter)
    std::printf("data: %s, %lld train / %lld test examples; mesh %s; batch %lld; %lld epochs\n",
                data.source.c_str(), static_cast<long long>(data.train->num_examples()),
                static_cast<long long>(data.test->num_examples()), mesh.dims_string().c_str(),
                static_cast<long long>(flags.batch_size), static_cast<long long>(flags.epochs));

  examples::Mlp model(mesh, {784, 700, 500, 10}, flags.seed);
  Adam optimizer(flags.lr);
  std::vector<DVariable> vars = model.variables();
  // One training step on (images, labels); returns the batch's loss sum and correct count. The
  // metric sums are read outside the step: a captured step cannot read values on the host.
  FunctionOptions step_options;
  step_options.eager = flags.eager;
  Function train_step = function(
      [&](const std::vector<DTensor>& batch) {
        GradientTape tape;
        for (const DVariable& v : vars) tape.watch(v);
        DTensor logits = model(batch[0]);
        DTensor loss = reduce_mean(sparse_softmax_cross_entropy(logits, batch[1]));
        std::vector<DTensor> grads = tape.gradient(loss, vars);
        optimizer.apply(vars, grads);
        return batch_sum_tensors(logits, batch[1]);
      },
      step_options);

  data::Dataset train(data.train, host_mesh, batch_dim);
  train.cache().shuffle(flags.seed).batch(flags.batch_size).repeat(flags.epochs).prefetch(2);
  data::Dataset test(data.test, host_mesh, batch_dim);
  test.cache().batch(flags.batch_size).repeat(1);

  std::ofstream metrics;
  if (reporter && !flags.metrics_out.empty()) metrics.open(flags.metrics_out);
  std::vector<double> train_loss, train_acc, test_loss, test_acc;
  cli::Progress progress(flags.epochs, reporter);
  std::optional<cli::EventWriter> events;
  if (reporter && !flags.tensorboard_dir.empty()) events.emplace(flags.tensorboard_dir);
  int64_t global_step = 0;
  for (int64_t epoch = 0; epoch < flags.epochs; ++epoch) {
    progress.begin_epoch(epoch, train.batches_per_epoch());
    double loss_sum = 0, correct = 0;
    int64_t seen = 0, step = 0;
    std::vector<double> step_ms;
    for (int64_t b = 0; b < train.batches_per_epoch(); ++b) {
      std::optional<data::Batch> batch = train.next();
      const auto start = std::chrono::steady_clock::now();
      std::vector<DTensor> sums =
          train_step({on_mesh(batch->features, mesh), on_mesh(batch->labels, mesh)});
      step_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      auto [l, c] = read_sums(sums);
      loss_sum += l;
      correct += c;
      seen += batch->size;
      ++global_step;
      progress.step(++step, {{"loss", loss_sum / seen}, {"accuracy", correct / seen}});
    }
    EpochMetrics tr{loss_sum / std::max<int64_t>(seen, 1), correct / std::max<int64_t>(seen, 1)};
    test.restore({0, 0});
    double test_loss_sum = 0, test_correct = 0;
    int64_t test_seen = 0;
    while (auto batch = test.next()) {
      auto [l, c] = batch_sums(model(on_mesh(batch->features, mesh)), on_mesh(batch->labels, mesh));
      test_loss_sum += l;
      test_correct += c;
      test_seen += batch->size;
    }
    EpochMetrics te{test_loss_sum / std::max<int64_t>(test_seen, 1),
                    test_correct / std::max<int64_t>(test_seen, 1)};
    const double seconds = progress.end_epoch({{"loss", tr.loss},
                                               {"accuracy", tr.accuracy},
                                               {"test_loss", te.loss},
                                               {"test_accuracy", te.accuracy}});
    if (reporter) {
      std::printf("step time: median %.3f ms per step (%s)\n", median(step_ms),
                  flags.eager ? "eager" : "captured");
      std::fflush(stdout);
    }
    if (metrics.is_open()) {
      metrics.precision(9);
      metrics << "{\"epoch\":" << epoch + 1 << ",\"step\":" << global_step
              << ",\"train_loss\":" << tr.loss << ",\"train_acc\":" << tr.accuracy
              << ",\"test_loss\":" << te.loss << ",\"test_acc\":" << te.accuracy
              << ",\"lr\":" << flags.lr << ",\"wall_s\":" << seconds
              << ",\"examples_per_s\":" << static_cast<double>(seen) / std::max(seconds, 1e-9)
              << ",\"loss_bits\":\"" << fmt::format("{:a}/{:a}", tr.loss, te.loss) << "\"}\n";
      metrics.flush();
    }
    if (events) {
      events->scalar("loss/train", tr.loss, epoch + 1);
      events->scalar("loss/test", te.loss, epoch + 1);
      events->scalar("accuracy/train", tr.accuracy, epoch + 1);
      events->scalar("accuracy/test", te.accuracy, epoch + 1);
      events->scalar("examples_per_second", static_cast<double>(seen) / std::max(seconds, 1e-9),
                     epoch + 1);
    }
    train_loss.push_back(tr.loss);
    train_acc.push_back(tr.accuracy);
    test_loss.push_back(te.loss);
    test_acc.push_back(te.accuracy);
  }
  if (reporter && !flags.plot.empty()) {
    cli::write_training_plot(
        flags.plot,
        {{"Loss per epoch",
          "cross-entropy loss",
          {{"train", train_loss}, {"test", test_loss}},
          0.0,
          std::nullopt},
         {"Accuracy per epoch", "accuracy", {{"train", train_acc}, {"test", test_acc}}, 0.0, 1.0}});
    std::printf("plot: %s\n", flags.plot.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [&](Runtime& rt) { return run(argc, argv, rt); });
}
