// Prints throughput figures for the hot kernels (not a test: nothing asserts on time).
//   tools/bazel run //bench:kernels_bench
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <random>

#include "cli/flags.h"
#include "kernels/kernels.h"

using namespace dtensor;
using namespace dtensor::kernels;

namespace {

// Best time of `reps` runs, in seconds, after one warm-up run.
double best_seconds(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    fn();
    std::chrono::duration<double> d = std::chrono::steady_clock::now() - start;
    best = std::min(best, d.count());
  }
  return best;
}

Tensor random_f32(const Shape& shape) {
  static std::mt19937 rng(0);
  std::uniform_real_distribution<float> dist(-1, 1);
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = dist(rng);
  return t;
}

void report_bandwidth(const char* what, double bytes, double seconds) {
  std::printf("%-44s %8.3f ms  %7.2f GB/s\n", what, seconds * 1e3, bytes / seconds / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("kernels_bench",
                            "Times the hot CPU kernels (matmul, elementwise, reductions, softmax) "
                            "next to OpenBLAS and memcpy.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const int64_t n = 1024;
  Tensor a = random_f32({n, n}), b = random_f32({n, n});
  for (int threads : {1, 2}) {
    set_blas_threads(threads);
    Tensor c = Tensor::empty({n, n}, DType::kF32);
    const double direct = best_seconds(10, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n,
                  b.data<float>(), n, 0.0f, c.data<float>(), n);
    });
    const double ours = best_seconds(10, [&] { matmul(a, b); });
    const double flops = 2.0 * n * n * n;
    std::printf(
        "matmul 1024^3 f32, %d BLAS thread(s): cblas_sgemm %.1f GFLOP/s, matmul %.1f "
        "GFLOP/s (%.1f%%)\n",
        threads, flops / direct / 1e9, flops / ours / 1e9, 100.0 * direct / ours);
  }

  const int64_t m = 1 << 20;
  Tensor x = random_f32({m}), y = random_f32({m});
  std::vector<float> dst(static_cast<size_t>(m));
  report_bandwidth("memcpy 4 MiB (read + write)", 2.0 * 4 * m, best_seconds(50, [&] {
                     std::memcpy(dst.data(), x.data<float>(), static_cast<size_t>(m) * 4);
                   }));
  report_bandwidth("add f32 [1M] + [1M] (2 reads + 1 write)", 3.0 * 4 * m,
                   best_seconds(50, [&] { binary(BinaryOp::kAdd, x, y); }));
  Tensor rows = random_f32({1024, 1024}), bias = random_f32({1024});
  report_bandwidth("add f32 [1024,1024] + [1024]", 2.0 * 4 * m,
                   best_seconds(50, [&] { binary(BinaryOp::kAdd, rows, bias); }));
  Tensor narrow = random_f32({m / 16, 16}), nbias = random_f32({16});
  report_bandwidth("add f32 [65536,16] + [16]", 2.0 * 4 * m,
                   best_seconds(50, [&] { binary(BinaryOp::kAdd, narrow, nbias); }));
  Tensor col = random_f32({1024, 1});
  report_bandwidth("add f32 [1024,1024] + [1024,1]", 2.0 * 4 * m,
                   best_seconds(50, [&] { binary(BinaryOp::kAdd, rows, col); }));
  report_bandwidth("mul f32 [1M] * scalar", 2.0 * 4 * m,
                   best_seconds(50, [&] { binary(BinaryOp::kMul, x, random_f32({})); }));
  report_bandwidth("scale f32 [1M]", 2.0 * 4 * m, best_seconds(50, [&] { scale(x, 0.5); }));
  report_bandwidth("relu f32 [1M]", 2.0 * 4 * m,
                   best_seconds(50, [&] { unary(UnaryOp::kRelu, x); }));
  report_bandwidth("exp f32 [1M]", 2.0 * 4 * m, best_seconds(20, [&] { unary(UnaryOp::kExp, x); }));
  report_bandwidth("cast f32 -> bf16 [1M]", 6.0 * m,
                   best_seconds(50, [&] { cast(x, DType::kBF16); }));

  report_bandwidth("reduce_sum f32 [1024,1024] axis 1", 4.0 * m,
                   best_seconds(50, [&] { reduce(ReduceKind::kSum, rows, {1}, false); }));
  report_bandwidth("reduce_sum f32 [1024,1024] axis 0", 4.0 * m,
                   best_seconds(50, [&] { reduce(ReduceKind::kSum, rows, {0}, false); }));
  report_bandwidth("reduce_sum f32 [1M] all", 4.0 * m,
                   best_seconds(50, [&] { reduce(ReduceKind::kSum, x, {}, false); }));
  report_bandwidth("reduce_max f32 [1024,1024] axis 1", 4.0 * m,
                   best_seconds(50, [&] { reduce(ReduceKind::kMax, rows, {1}, false); }));
  report_bandwidth("reduce_max f32 [1024,1024] axis 0", 4.0 * m,
                   best_seconds(50, [&] { reduce(ReduceKind::kMax, rows, {0}, false); }));
  report_bandwidth("sum_to f32 [1024,1024] -> [1024] (bias grad)", 4.0 * m,
                   best_seconds(50, [&] { sum_to(rows, {1024}); }));
  report_bandwidth("softmax f32 [1024,1024] axis -1", 8.0 * m,
                   best_seconds(20, [&] { softmax(rows, -1); }));
  report_bandwidth("transpose f32 [1024,1024]", 8.0 * m, best_seconds(20, [&] {
                     transpose(rows, {1, 0});
                   }));
  Tensor odd = random_f32({1000, 1000});
  report_bandwidth("transpose f32 [1000,1000]", 8.0 * 1e6, best_seconds(20, [&] {
                     transpose(odd, {1, 0});
                   }));
  Tensor batched = random_f32({64, 128, 128});
  report_bandwidth("transpose f32 [64,128,128] perm [0,2,1]", 8.0 * m, best_seconds(20, [&] {
                     transpose(batched, {0, 2, 1});
                   }));
  Tensor labels = Tensor::zeros({1024}, DType::kI32);
  report_bandwidth("sparse CE f32 [1024,1024]", 4.0 * m,
                   best_seconds(20, [&] { sparse_softmax_cross_entropy(rows, labels); }));
  Tensor gamma = random_f32({1024});
  report_bandwidth("layer_norm f32 [1024,1024]", 8.0 * m,
                   best_seconds(20, [&] { layer_norm(rows, gamma, gamma, 1e-5); }));
  return 0;
}
