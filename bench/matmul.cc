// Matmul throughput through the runtime on 1 and 8 virtual devices, next to OpenBLAS called
// directly in the same run. 8 devices: rows of x sharded, w replicated (data parallel).
//
// Then, per shape of the seed MLP step (and 2048^3), oneDNN's f32 gemm against OpenBLAS's, both
// called directly, alternating in the same run: the figures behind the CPU matmul's choice of
// backend (kernels/cpu/matmul.cc, onednn_wins).
#include <cblas.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "kernels/cpu/matmul_onednn.h"
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

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("matmul",
                            "Sharded matmul GFLOP/s on 1 and 8 devices next to OpenBLAS. Prints "
                            "one JSON object per measurement.");
  int64_t rounds = 5;
  bool backends_only = false;
  flags.add_int("--rounds", &rounds, "alternating rounds per shape (oneDNN vs OpenBLAS)", 1, 1000);
  flags.add_bool("--backends_only", &backends_only,
                 "only the oneDNN vs OpenBLAS comparison, not the runtime figures");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
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
  for (int64_t n : {256, 512, 1024, 2048}) {
    const double flops = 2.0 * n * n * n;
    const int reps = n >= 2048 ? 5 : 11;
    auto field = [&](const char* path, int64_t devices) {
      return std::vector<bench::Field>{{"path", std::string(path)}, {"n", n}, {"devices", devices}};
    };
    Tensor a = Tensor::zeros({n, n}, DType::kF32), b = Tensor::zeros({n, n}, DType::kF32);
    Tensor c = Tensor::zeros({n, n}, DType::kF32);
    const int cores = openblas_get_num_procs();
    openblas_set_num_threads(cores);
    double t = bench::median_seconds(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n),
                      static_cast<int>(n), static_cast<int>(n), 1.0f, a.data<float>(),
                      static_cast<int>(n), b.data<float>(), static_cast<int>(n), 0.0f,
                      c.data<float>(), static_cast<int>(n));
        },
        reps);
    bench::report("matmul", field("openblas_direct", 1), flops / t / 1e9, "GFLOP/s");

    for (int64_t devices : {1, 8}) {
      Mesh mesh = Mesh::create({{"batch", devices}}, DeviceType::kCPU);
      DTensor x = random_uniform({n, n}, Layout::batch_sharded(mesh, "batch", 2), 1);
      DTensor w = random_uniform({n, n}, Layout::replicated(mesh, 2), 2);
      t = bench::median_seconds([&] { bench::do_not_optimize(matmul(x, w)); }, reps);
      bench::report("matmul", field("runtime", devices), flops / t / 1e9, "GFLOP/s");
    }
  }
}
