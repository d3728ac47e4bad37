// A checkpoint saved by one run and restored by another, in other processes (real ones, under
// mpirun), meshes and layouts: the restored global values are bit-identical and training goes on
// with the losses the saving run had without interruption. Run by mpi_roundtrip_test.sh.
//
//   mpi_roundtrip --mode=save --dir=D [--mesh=batch=8]
//     Trains a small MLP with Adam for 2 steps on the mesh (spread over the processes of the job),
//     saves D/ckpt, then trains 2 more steps. Process 0 writes D/expected.txt: the global value of
//     every tracked variable and optimizer slot at the save (as hex bytes), the optimizer step,
//     the dataset position and the 2 losses that followed.
//   mpi_roundtrip --mode=restore --dir=D --mesh=M [--expected=FILE]
//     Builds the same objects afresh (other initial values) in M's layouts, restores D/ckpt,
//     checks every value bit for bit against FILE (default D/expected.txt), trains 2 steps and
//     checks the losses: bit for bit on the saving mesh, within 1e-5 relative on another (the
//     reduction order depends on the mesh). Exits 1 after naming each mismatch.
//
// Layouts: with a "model" dim the MLP is model-parallel (w1 column-sharded, w2 row-sharded) and
// the other variables are sharded over both dims; otherwise the MLP is replicated and the others
// are sharded over the first dim. Uneven shapes throughout; f32, f64 and i32.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dtensor/creation.h"
#include "dtensor/runtime.h"
#include "dtensor/virtual_devices.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"

namespace {

using namespace dtensor;

constexpr const char* kFunction = "mpi_roundtrip";
constexpr int64_t kExamples = 40, kIn = 6, kHidden = 12, kClasses = 3, kBatch = 16;
constexpr int kStepsBefore = 2, kStepsAfter = 2;
constexpr double kLossTolerance = 1e-5;

struct Flags {
  std::string mode;
  std::string dir;
  std::string mesh = "batch=8";
  std::string expected;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      throw_error<InvalidArgumentError>(kFunction, "expected --name=value, got '{}'", arg);
    }
    std::string name = arg.substr(2, eq - 2), value = arg.substr(eq + 1);
    if (name == "mode")
      f.mode = value;
    else if (name == "dir")
      f.dir = value;
    else if (name == "mesh")
      f.mesh = value;
    else if (name == "expected")
      f.expected = value;
    else
      throw_error<InvalidArgumentError>(kFunction, "unknown flag --{}", name);
  }
  if ((f.mode != "save" && f.mode != "restore") || f.dir.empty()) {
    throw_error<InvalidArgumentError>(kFunction,
                                      "usage: --mode=save|restore --dir=D [--mesh=M] "
                                      "[--expected=FILE]; got mode '{}', dir '{}'",
                                      f.mode, f.dir);
  }
  if (f.expected.empty()) f.expected = f.dir + "/expected.txt";
  return f;
}

struct Examples {
  Tensor features, labels;
};

// The same on every process and in every run.
Examples examples() {
  Examples e{Tensor::empty({kExamples, kIn}, DType::kF32), Tensor::empty({kExamples}, DType::kI32)};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t i = 0; i < kExamples * kIn; ++i) e.features.data<float>()[i] = unit(rng);
  for (int64_t i = 0; i < kExamples; ++i) {
    e.labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % kClasses);
  }
  return e;
}

// Everything a checkpoint of the run holds. `seed` draws the initial values: the saving run and
// the restoring run use different ones, so that a value restore leaves alone cannot pass.
struct Run {
  Mesh mesh;
  bool model_parallel;
  DVariable w1, b1, w2;
  DVariable uneven, replicated, wide, counts;
  Adam adam{0.05};
  data::Dataset train;
  int64_t epoch = 0;
  Checkpoint checkpoint;

  // Layout of a rank-2 non-model variable: sharded over both dims of a two-dim mesh (in the
  // order given), otherwise dim `axis` over the first dim.
  static Layout other_layout(const Mesh& m, bool model_parallel, int64_t axis, bool swap) {
    const std::string first = m.dims()[0].name;
    if (model_parallel) {
      return swap ? Layout({"model", first}, m) : Layout({first, "model"}, m);
    }
    return Layout::batch_sharded(m, first, 2, axis);
  }

  Run(const Mesh& m, uint64_t seed, const Examples& e)
      : mesh(m),
        model_parallel(m.has_dim("model")),
        w1(random_uniform(
               {kIn, kHidden},
               model_parallel ? Layout({"unsharded", "model"}, m) : Layout::replicated(m, 2), seed,
               -0.5, 0.5),
           "dense_0/kernel"),
        b1(random_uniform({kHidden},
                          model_parallel ? Layout({"model"}, m) : Layout::replicated(m, 1),
                          seed + 1, -0.1, 0.1),
           "dense_0/bias"),
        w2(random_uniform(
               {kHidden, kClasses},
               model_parallel ? Layout({"model", "unsharded"}, m) : Layout::replicated(m, 2),
               seed + 2, -0.5, 0.5),
           "dense_1/kernel"),
        uneven(random_uniform({13, 7}, other_layout(m, model_parallel, 0, true), seed + 3),
               "uneven"),
        replicated(random_uniform({5, 3}, Layout::replicated(m, 2), seed + 4), "replicated"),
        wide(random_normal({6, 17}, other_layout(m, model_parallel, 1, true), seed + 5, 0.0, 1.0,
                           DType::kF64),
             "wide"),
        counts(random_uniform({11, 10}, other_layout(m, model_parallel, 1, false), seed + 6,
                              -1000.0, 1000.0, DType::kI32),
               "counts"),
        train(e.features, e.labels, m, "batch") {
    train.shuffle(3).batch(kBatch).repeat();
    checkpoint.add_variables("model", model_vars());
    checkpoint.add_variables("extra", {uneven, replicated, wide, counts});
    checkpoint.add_optimizer("adam", adam, model_vars());
    checkpoint.add_dataset("train", train);
    checkpoint.add_int("epoch", &epoch);
  }

  std::vector<DVariable> model_vars() const { return {w1, b1, w2}; }

  // One training step; returns the loss (the same on every process).
  float step() {
    data::Batch batch = *train.next();
    epoch = batch.epoch;
    GradientTape tape;
    for (const DVariable& v : model_vars()) tape.watch(v);
    DTensor hidden = relu(add(matmul(batch.features, w1.value()), b1.value()));
    DTensor loss =
        reduce_mean(sparse_softmax_cross_entropy(matmul(hidden, w2.value()), batch.labels));
    adam.apply(model_vars(), tape.gradient(loss, model_vars()));
    return to_global(loss).data<float>()[0];
  }

  // Global values of every variable and slot, by checkpoint name. Collective.
  std::map<std::string, Tensor> state() const {
    std::map<std::string, Tensor> out;
    for (const DVariable& v : model_vars()) out["model/" + v.name()] = to_global(v.value());
    for (const DVariable& v : {uneven, replicated, wide, counts}) {
      out["extra/" + v.name()] = to_global(v.value());
    }
    for (const auto& [name, slot] : adam.slots()) out["adam/" + name] = to_global(slot.value());
    return out;
  }
};

std::string to_hex(const void* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

std::string from_hex(const std::string& hex, const std::string& what) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw_error<IoError>(kFunction, "bad hex digit '{}' in {}", c, what);
  };
  if (hex.size() % 2 != 0) throw_error<IoError>(kFunction, "odd hex length in {}", what);
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  }
  return out;
}

std::string dims_text(const Shape& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out.empty() ? "-" : out;
}

Shape parse_dims(const std::string& text) {
  Shape shape;
  if (text == "-") return shape;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) shape.push_back(std::stoll(item));
  return shape;
}

// What the saving run recorded (the file format is one record per line, see write_expected).
struct Expected {
  std::string mesh;
  int64_t processes = 0;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, int64_t> ints;
  std::vector<float> losses;
};

void write_expected(const std::string& path, const Expected& e) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << "mesh " << e.mesh << "\nprocesses " << e.processes << "\n";
    for (const auto& [name, t] : e.tensors) {
      out << "tensor " << name << " " << dtype_name(t.dtype()) << " " << dims_text(t.shape()) << " "
          << to_hex(t.raw_data(), t.nbytes()) << "\n";
    }
    for (const auto& [name, value] : e.ints) out << "int " << name << " " << value << "\n";
    for (float loss : e.losses) out << "loss " << to_hex(&loss, sizeof loss) << "\n";
    out.flush();
    if (!out) throw_error<IoError>(kFunction, "cannot write '{}'", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw_error<IoError>(kFunction, "cannot rename '{}' to '{}'", tmp, path);
  }
}

Expected read_expected(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error<IoError>(kFunction, "cannot read '{}'", path);
  Expected e;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    const std::string where = fmt::format("'{}' line {}", path, number);
    if (kind == "mesh") {
      fields >> e.mesh;
    } else if (kind == "processes") {
      fields >> e.processes;
    } else if (kind == "tensor") {
      std::string name, dtype, dims, hex;
      fields >> name >> dtype >> dims >> hex;
      Tensor t = Tensor::empty(parse_dims(dims), parse_dtype(dtype));
      std::string bytes = from_hex(hex, where);
      if (bytes.size() != t.nbytes()) {
        throw_error<IoError>(kFunction, "{}: {} bytes for {}[{}], expected {}", where, bytes.size(),
                             dtype, dims, t.nbytes());
      }
      std::memcpy(t.raw_data(), bytes.data(), bytes.size());
      e.tensors[name] = t;
    } else if (kind == "int") {
      std::string name;
      int64_t value = 0;
      fields >> name >> value;
      e.ints[name] = value;
    } else if (kind == "loss") {
      std::string hex;
      fields >> hex;
      std::string bytes = from_hex(hex, where);
      float loss = 0;
      if (bytes.size() != sizeof loss) throw_error<IoError>(kFunction, "{}: bad loss", where);
      std::memcpy(&loss, bytes.data(), sizeof loss);
      e.losses.push_back(loss);
    } else {
      throw_error<IoError>(kFunction, "{}: unknown record '{}'", where, kind);
    }
    if (fields.fail()) throw_error<IoError>(kFunction, "{}: malformed record", where);
  }
  if (e.mesh.empty() || e.losses.size() != static_cast<size_t>(kStepsAfter)) {
    throw_error<IoError>(kFunction, "'{}' is incomplete", path);
  }
  return e;
}

std::map<std::string, int64_t> counters(const Run& run) {
  data::Dataset::State s = run.train.state();
  return {{"adam_step", run.adam.step()},
          {"dataset_epoch", s.epoch},
          {"dataset_batch", s.batch},
          {"epoch", run.epoch}};
}

// Where two tensors of one shape and dtype first differ, as text.
std::string first_difference(const Tensor& a, const Tensor& b) {
  const size_t item = dtype_size(a.dtype());
  const auto* x = static_cast<const unsigned char*>(a.raw_data());
  const auto* y = static_cast<const unsigned char*>(b.raw_data());
  int64_t differing = 0, first = -1;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (std::memcmp(x + i * item, y + i * item, item) != 0) {
      if (first < 0) first = i;
      ++differing;
    }
  }
  return fmt::format("{} of {} elements differ, first at flat index {} (bytes {} vs expected {})",
                     differing, a.num_elements(), first,
                     to_hex(x + first * static_cast<int64_t>(item), item),
                     to_hex(y + first * static_cast<int64_t>(item), item));
}

Mesh make_mesh(const std::string& text, const Runtime& rt) {
  std::vector<MeshDim> dims = parse_mesh_dims(text);
  if (dims.empty() || dims[0].name != "batch") {
    throw_error<InvalidArgumentError>(kFunction, "mesh {} must start with a batch dim", text);
  }
  int64_t devices = 1;
  for (const MeshDim& d : dims) devices *= d.size;
  if (devices % rt.num_processes() != 0) {
    throw_error<InvalidArgumentError>(kFunction, "mesh {} has {} devices, not divisible by {}",
                                      text, devices, rt.num_processes());
  }
  configure_virtual_cpus(devices / rt.num_processes());
  return create_mesh(dims);
}

int save(const Flags& flags, const Runtime& rt) {
  const Examples e = examples();
  Run run(make_mesh(flags.mesh, rt), 1, e);
  for (int i = 0; i < kStepsBefore; ++i) run.step();
  run.checkpoint.save(flags.dir + "/ckpt");

  Expected expected{run.mesh.dims_string(), rt.num_processes(), run.state(), counters(run), {}};
  for (int i = 0; i < kStepsAfter; ++i) expected.losses.push_back(run.step());
  if (rt.process_index() == 0) {
    write_expected(flags.expected, expected);
    std::printf("saved %s on mesh %s in %lld process(es): %zu tensors; next losses",
                (flags.dir + "/ckpt").c_str(), expected.mesh.c_str(),
                static_cast<long long>(rt.num_processes()), expected.tensors.size());
    for (float loss : expected.losses) std::printf(" %.9g", loss);
    std::printf("\n");
  }
  return 0;
}

int restore(const Flags& flags, const Runtime& rt) {
  const Expected expected = read_expected(flags.expected);
  const Examples e = examples();
  Run run(make_mesh(flags.mesh, rt), 1001, e);
  run.checkpoint.restore(flags.dir + "/ckpt");

  // Every process compares (to_global gives each the whole value).
  std::vector<std::string> problems;
  const std::map<std::string, Tensor> state = run.state();
  for (const auto& [name, want] : expected.tensors) {
    auto it = state.find(name);
    if (it == state.end()) {
      problems.push_back(fmt::format("{}: saved but not restored", name));
    } else if (it->second.dtype() != want.dtype() || it->second.shape() != want.shape()) {
      problems.push_back(fmt::format("{}: restored {}{}, saved {}{}", name,
                                     dtype_name(it->second.dtype()),
                                     shape_to_string(it->second.shape()), dtype_name(want.dtype()),
                                     shape_to_string(want.shape())));
    } else if (!bitwise_equal(it->second, want)) {
      problems.push_back(fmt::format("{}: {}", name, first_difference(it->second, want)));
    }
  }
  for (const auto& [name, value] : state) {
    if (!expected.tensors.count(name)) problems.push_back(name + ": restored but never saved");
  }
  const std::map<std::string, int64_t> have = counters(run);
  for (const auto& [name, want] : expected.ints) {
    auto it = have.find(name);
    if (it == have.end() || it->second != want) {
      problems.push_back(fmt::format("{}: {} after restore, {} saved", name,
                                     it == have.end() ? "missing" : std::to_string(it->second),
                                     want));
    }
  }

  // The saving mesh reproduces the saving run's reductions exactly; another mesh sums in
  // another order.
  const bool exact = run.mesh.dims_string() == expected.mesh;
  std::vector<float> losses;
  double max_relative = 0;
  for (int i = 0; i < kStepsAfter; ++i) {
    const float loss = run.step(), want = expected.losses[static_cast<size_t>(i)];
    losses.push_back(loss);
    max_relative = std::max(max_relative, std::fabs(static_cast<double>(loss) - want) /
                                              std::fabs(static_cast<double>(want)));
    const bool same = exact ? std::memcmp(&loss, &want, sizeof loss) == 0
                            : std::fabs(static_cast<double>(loss) - want) <=
                                  kLossTolerance * std::fabs(static_cast<double>(want));
    if (!same) {
      problems.push_back(fmt::format("loss {} after the restore: {:.9g}, uninterrupted {:.9g} ({})",
                                     i + 1, loss, want, exact ? "bitwise" : "1e-5 relative"));
    }
  }

  const std::string what = fmt::format(
      "{} (saved on {} in {} process(es)) restored on {} in {} process(es)", flags.dir + "/ckpt",
      expected.mesh, expected.processes, run.mesh.dims_string(), rt.num_processes());
  if (!problems.empty()) {
    // Every process that finds a mismatch says so: the first to return ends the job, possibly
    // before the others print.
    std::string report = "MISMATCH";
    if (rt.num_processes() > 1) {
      report += fmt::format(" (process {} of {})", rt.process_index(), rt.num_processes());
    }
    report += ": " + what + ":\n";
    for (const std::string& p : problems) report += "  " + p + "\n";
    std::fputs(report.c_str(), stderr);
  } else if (rt.process_index() == 0) {
    std::printf("OK: %s: %zu tensors bit-identical, counters equal; losses", what.c_str(),
                expected.tensors.size());
    for (float loss : losses) std::printf(" %.9g", loss);
    std::printf(" match the uninterrupted run (%s; largest relative difference %.3g)\n",
                exact ? "bitwise" : "within 1e-5 relative", max_relative);
    std::fflush(stdout);
  }
  return problems.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return dtensor::run_main(argc, argv, [&](dtensor::Runtime& rt) {
    const Flags flags = parse_flags(argc, argv);
    return flags.mode == "save" ? save(flags, rt) : restore(flags, rt);
  });
}
