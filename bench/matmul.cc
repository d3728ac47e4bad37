// Matmul throughput through the runtime on 1 and 8 virtual devices, next to OpenBLAS called
// directly in the same run. 8 devices: rows of x sharded, w replicated (data parallel).
#include <cblas.h>
#include <optional>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/ops.h"

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("matmul",
                            "Sharded matmul GFLOP/s on 1 and 8 devices next to OpenBLAS. Prints "
                            "one JSON object per measurement.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  using namespace dtensor;
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
