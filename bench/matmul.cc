// Matmul throughput. Per shape of the seed MLP step (and 2048^3), oneDNN's f32 gemm against
// OpenBLAS's, both called directly, alternating in the same run: the figures behind the CPU
// matmul's choice of backend (kernels/cpu/matmul.cc, onednn_wins). Then n^3 for n = 256..2048
// through the runtime (1 and 8 virtual devices in f32, rows of x sharded and w replicated; 1
// device in bf16) next to OpenBLAS and oneDNN called directly on all cores, interleaved rounds,
// with the runtime's ratio to the best direct call of its dtype.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "kernels/cpu/matmul_onednn.h"
#include "kernels/kernels.h"
#include "ops/ops.h"

namespace {

using namespace dtensor;

struct GemmCase {
  const char* step;  // where the seed step runs it
  int64_t m, n, k;
  bool ta, tb;
};

// The seed MLP's GEMMs (784-700-500-10) for `rows` rows: forward x @ w, backward dx = g @ w^T
// and dw = x^T @ g.
std::vector<GemmCase> seed_cases(int64_t rows) {
  std::vector<GemmCase> cases;
  const int64_t dims[] = {784, 700, 500, 10};
  for (int i = 0; i < 3; ++i) {
    const int64_t k = dims[i], n = dims[i + 1];
    cases.push_back({"forward", rows, n, k, false, false});
    cases.push_back({"grad_x", rows, k, n, false, true});
    cases.push_back({"grad_w", k, n, rows, true, false});
  }
  return cases;
}

void compare_backends(const GemmCase& c, int threads, int rounds) {
  openblas_set_num_threads(threads);
  Tensor a = Tensor::zeros({c.m * c.k}, DType::kF32);
  Tensor b = Tensor::zeros({c.k * c.n}, DType::kF32);
  std::fill(a.data<float>(), a.data<float>() + c.m * c.k, 0.5f);
  std::fill(b.data<float>(), b.data<float>() + c.k * c.n, 0.25f);
  Tensor out = Tensor::zeros({c.m * c.n}, DType::kF32);
  const kernels::cpu::onednn::GemmShape shape{c.m, c.n, c.k, c.ta, c.tb, DType::kF32};
  const std::string impl = kernels::cpu::onednn::implementation(shape, {});
  const double flops = 2.0 * static_cast<double>(c.m * c.n * c.k);
  const int reps = flops > 1e9 ? 5 : flops > 1e8 ? 21 : 101;
  auto run_onednn = [&] {
    kernels::cpu::onednn::gemm(shape, {}, a.data<float>(), b.data<float>(), out.data<float>(),
                               threads);
  };
  auto run_blas = [&] {
    cblas_sgemm(CblasRowMajor, c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(c.m), static_cast<int>(c.n), static_cast<int>(c.k), 1.0f,
                a.data<float>(), static_cast<int>(c.ta ? c.m : c.k), b.data<float>(),
                static_cast<int>(c.tb ? c.k : c.n), 0.0f, out.data<float>(), static_cast<int>(c.n));
  };
  // Alternate the two, round by round, and keep each one's median of round medians.
  std::vector<double> t_onednn, t_blas;
  for (int r = 0; r < rounds; ++r) {
    if (!impl.empty()) t_onednn.push_back(bench::median_seconds(run_onednn, reps));
    t_blas.push_back(bench::median_seconds(run_blas, reps));
  }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  auto fields = [&](const char* backend) {
    return std::vector<bench::Field>{{"path", std::string(backend)},
                                     {"step", std::string(c.step)},
                                     {"m", c.m},
                                     {"n", c.n},
                                     {"k", c.k},
                                     {"ta", int64_t{c.ta}},
                                     {"tb", int64_t{c.tb}},
                                     {"threads", int64_t{threads}},
                                     {"impl", impl}};
  };
  if (!impl.empty()) {
    bench::report("matmul_backend", fields("onednn"), flops / median(t_onednn) / 1e9, "GFLOP/s");
  }
  bench::report("matmul_backend", fields("openblas"), flops / median(t_blas) / 1e9, "GFLOP/s");
}

// The row-stacked matmul (ops/expand.h, Stacking::rows_of) on the seed MLP's first layer, batch
// 128 (x [128,784] @ w [784,700], w replicated), in f32 and f64: on batch=8 (eight distinct row
// blocks, one call) and on a=2,b=2,c=2 with x from flatten(h [128,28,28,1] [c,a,b,unsharded]),
// whose rows are sharded over c only, each block held by four replicas in distinct buffers.
void stacked_matmul(int rounds) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (const char* mesh_spec : {"batch=8", "a=2,b=2,c=2"}) {
      const Mesh mesh = Mesh::create(parse_mesh_dims(mesh_spec), DeviceType::kCPU);
      const bool replicas = mesh.rank() == 3;
      const DTensor x =
          replicas
              ? flatten(random_uniform({128, 28, 28, 1}, Layout({"c", "a", "b", "unsharded"}, mesh),
                                       1, -1, 1, dtype))
              : random_uniform({128, 784}, Layout::batch_sharded(mesh, "batch", 2), 1, -1, 1,
                               dtype);
      const DTensor w = random_uniform({784, 700}, Layout::replicated(mesh, 2), 2, -1, 1, dtype);
      std::vector<double> times;
      for (int r = 0; r < rounds; ++r) {
        times.push_back(bench::median_seconds([&] { bench::do_not_optimize(matmul(x, w)); }, 51));
      }
      std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2),
                       times.end());
      bench::report("matmul_stacked",
                    {{"mesh", std::string(mesh_spec)},
                     {"dtype", std::string(dtype_name(dtype))},
                     {"x", x.short_string()}},
                    times[times.size() / 2] * 1e3, "ms");
    }
  }
}

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// n^3 products through the runtime (1 and 8 devices, f32; 1 device, bf16) next to OpenBLAS and
// oneDNN called directly on all cores, in interleaved rounds; each path's median of round
// medians in GFLOP/s, and the runtime's ratio to the best direct call of its dtype. OpenBLAS's
// idle threads spin for a while after a multi-threaded call (kernels/cpu/gemm_blocks.h), so each
// round waits for them to sleep before the other paths run.
void runtime_vs_direct(int rounds) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int64_t n : {256, 512, 1024, 2048}) {
    const double flops = 2.0 * static_cast<double>(n * n * n);
    const int reps = n >= 2048 ? 3 : n >= 1024 ? 7 : 21;
    Tensor a = Tensor::zeros({n, n}, DType::kF32), b = Tensor::zeros({n, n}, DType::kF32);
    Tensor c = Tensor::zeros({n, n}, DType::kF32);
    std::fill(a.data<float>(), a.data<float>() + n * n, 0.5f);
    std::fill(b.data<float>(), b.data<float>() + n * n, 0.25f);
    const Tensor a16 = kernels::cast(a, DType::kBF16), b16 = kernels::cast(b, DType::kBF16);
    const kernels::cpu::onednn::GemmShape f32{n, n, n, false, false, DType::kF32};
    const kernels::cpu::onednn::GemmShape bf16{n, n, n, false, false, DType::kBF16};
    const Mesh one = Mesh::create({{"batch", 1}}, DeviceType::kCPU);
    const Mesh eight = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
    auto operands = [&](const Mesh& mesh, DType dtype) {
      return std::pair<DTensor, DTensor>(
          random_uniform({n, n}, Layout::batch_sharded(mesh, "batch", 2), 1, -1, 1, dtype),
          random_uniform({n, n}, Layout::replicated(mesh, 2), 2, -1, 1, dtype));
    };
    const auto one_f32 = operands(one, DType::kF32), eight_f32 = operands(eight, DType::kF32);
    const auto one_bf16 = operands(one, DType::kBF16);
    struct Path {
      const char* name;
      const char* dtype;
      int64_t devices;
      std::function<void()> run;
      std::vector<double> seconds;
    };
    std::vector<Path> paths = {
        {"openblas_direct",
         "f32",
         1,
         [&] {
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                       static_cast<int>(n), static_cast<int>(n), 1.0f, a.data<float>(),
                       static_cast<int>(n), b.data<float>(), static_cast<int>(n), 0.0f,
                       c.data<float>(), static_cast<int>(n));
         },
         {}},
        {"onednn_direct",
         "f32",
         1,
         [&] {
           kernels::cpu::onednn::gemm(f32, {}, a.raw_data(), b.raw_data(), c.data<float>(), cores);
         },
         {}},
        {"runtime",
         "f32",
         1,
         [&] { bench::do_not_optimize(matmul(one_f32.first, one_f32.second)); },
         {}},
        {"runtime",
         "f32",
         8,
         [&] { bench::do_not_optimize(matmul(eight_f32.first, eight_f32.second)); },
         {}},
        {"onednn_direct",
         "bf16",
         1,
         [&] {
           kernels::cpu::onednn::gemm(bf16, {}, a16.raw_data(), b16.raw_data(), c.data<float>(),
                                      cores);
         },
         {}},
        {"runtime",
         "bf16",
         1,
         [&] { bench::do_not_optimize(matmul(one_bf16.first, one_bf16.second)); },
         {}},
    };
    for (int r = 0; r < rounds; ++r) {
      for (Path& p : paths) {
        if (std::string(p.name) == "openblas_direct") openblas_set_num_threads(cores);
        p.seconds.push_back(bench::median_seconds(p.run, reps));
        if (std::string(p.name) == "openblas_direct") {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
      }
    }
    double best_f32 = 0, best_bf16 = 0;
    for (const Path& p : paths) {
      const double rate = flops / median_of(p.seconds) / 1e9;
      if (std::string(p.name) != "runtime") {
        double& best = std::string(p.dtype) == "f32" ? best_f32 : best_bf16;
        best = std::max(best, rate);
      }
    }
    for (const Path& p : paths) {
      const double rate = flops / median_of(p.seconds) / 1e9;
      std::vector<bench::Field> fields = {{"path", std::string(p.name)},
                                          {"dtype", std::string(p.dtype)},
                                          {"n", n},
                                          {"devices", p.devices},
                                          {"threads", int64_t{cores}}};
      if (std::string(p.name) == "runtime") {
        const double best = std::string(p.dtype) == "f32" ? best_f32 : best_bf16;
        fields.push_back({"vs_best_direct", rate / best});
      }
      bench::report("matmul", fields, rate, "GFLOP/s");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("matmul",
                            "Sharded matmul GFLOP/s on 1 and 8 devices next to OpenBLAS. Prints "
                            "one JSON object per measurement.");
  int64_t rounds = 5;
  bool backends_only = false;
  flags.add_int("--rounds", &rounds, "alternating rounds per shape (oneDNN vs OpenBLAS)", 1, 1000);
  bool stacked_only = false;
  flags.add_bool("--backends_only", &backends_only,
                 "only the oneDNN vs OpenBLAS comparison, not the runtime figures");
  flags.add_bool("--stacked_only", &stacked_only,
                 "only the row-stacked matmul on batch=8 and a=2,b=2,c=2 (ms per call)");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  if (stacked_only) {
    stacked_matmul(static_cast<int>(rounds));
    return 0;
  }
  using namespace dtensor;
  // One thread: a device's share on the 8-device mesh; all cores: one device.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int threads : {1, cores}) {
    for (int64_t rows : {16, 128}) {
      for (const GemmCase& c : seed_cases(rows)) {
        compare_backends(c, threads, static_cast<int>(rounds));
      }
    }
  }
  compare_backends({"large", 2048, 2048, 2048, false, false}, cores, static_cast<int>(rounds));
  if (backends_only) return 0;
  runtime_vs_direct(static_cast<int>(rounds));
  return 0;
}
