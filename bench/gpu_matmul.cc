// GPU matmul throughput: our kernels::matmul on GPU tensors (the front, then cuBLAS) next to
// cublasGemmEx called directly on the same buffers, 4096^3 (or --n) in f32 (TF32 off, then on)
// and bf16 with f32 accumulation. Both sides are timed the same way: `reps` calls, then one
// stream synchronize, median of rounds.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "bench/report.h"
#include "cli/flags.h"
#include "kernels/cuda/tf32.h"
#include "kernels/kernels.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

namespace {

using namespace dtensor;

Tensor random_matrix(int64_t n, DType dtype, const Device& gpu, uint32_t seed) {
  Tensor host = Tensor::empty({n, n}, DType::kF32);
  uint32_t s = seed;
  for (int64_t i = 0; i < host.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    host.data<float>()[i] = static_cast<float>(s >> 8) * 0x1p-24f - 0.5f;
  }
  return kernels::cast(cuda::to_device(host, gpu), dtype);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 4096;
  int64_t reps = 10;
  cli::Flags flags("gpu_matmul", "GPU matmul TFLOP/s: ours next to cublasGemmEx directly.");
  flags.add_int("--n", &n, "matrix size n (n x n x n)", 1);
  flags.add_int("--reps", &reps, "calls per timed round", 1);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const Device gpu{DeviceType::kGPU, 0};
  if (cuda::physical_gpu_count() == 0) {
    std::fprintf(stderr, "gpu_matmul: no GPU visible (%s)\n", cuda::no_gpu_reason().c_str());
    return 1;
  }
  cudaStream_t stream = cuda::activate(gpu, "gpu_matmul");
  cublasHandle_t handle;
  cublasCreate(&handle);
  cublasSetStream(handle, stream);
  const double flop =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  struct Case {
    const char* name;
    DType dtype;
    bool tf32;
  };
  for (const Case& c : {Case{"f32", DType::kF32, false}, Case{"tf32", DType::kF32, true},
                        Case{"bf16", DType::kBF16, false}}) {
    kernels::set_cuda_allow_tf32(c.tf32);
    Tensor a = random_matrix(n, c.dtype, gpu, 1), b = random_matrix(n, c.dtype, gpu, 2);
    Tensor out = Tensor::empty({n, n}, c.dtype, gpu);
    const double ours = bench::median_seconds([&] {
      for (int64_t i = 0; i < reps; ++i) bench::do_not_optimize(kernels::matmul(a, b));
      cuda::synchronize(gpu);
    });
    const cudaDataType_t type = c.dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t compute = c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float one = 1.0f, zero = 0.0f;
    const int ni = static_cast<int>(n);
    const double direct = bench::median_seconds([&] {
      for (int64_t i = 0; i < reps; ++i) {
        cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, b.raw_data(), type, ni,
                     a.raw_data(), type, ni, &zero, out.raw_data(), type, ni, compute,
                     CUBLAS_GEMM_DEFAULT);
      }
      cudaStreamSynchronize(stream);
    });
    const double ours_tflops = flop * static_cast<double>(reps) / ours / 1e12;
    const double direct_tflops = flop * static_cast<double>(reps) / direct / 1e12;
    bench::report("gpu_matmul", {{"impl", "dtensor"}, {"dtype", c.name}, {"n", n}}, ours_tflops,
                  "TFLOP/s");
    bench::report("gpu_matmul", {{"impl", "cublasGemmEx"}, {"dtype", c.name}, {"n", n}},
                  direct_tflops, "TFLOP/s");
    bench::report("gpu_matmul", {{"impl", "ratio"}, {"dtype", c.name}, {"n", n}},
                  ours_tflops / direct_tflops, "x");
  }
  kernels::set_cuda_allow_tf32(false);
  cublasDestroy(handle);
}
