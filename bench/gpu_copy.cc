// Host <-> GPU copy bandwidth: cuda::to_device / to_host (pageable host tensors through the pinned
// staging buffer) next to cudaMemcpy from and to pinned memory directly, for 1 MiB to 256 MiB.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "bench/report.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

int main() {
  using namespace dtensor;
  const Device gpu{DeviceType::kGPU, 0};
  if (cuda::physical_gpu_count() == 0) {
    std::fprintf(stderr, "gpu_copy: no GPU visible (%s)\n", cuda::no_gpu_reason().c_str());
    return 1;
  }
  for (int64_t mib : {1, 16, 256}) {
    const int64_t n = mib << 18;  // floats
    const double bytes = static_cast<double>(n) * 4;
    Tensor host = Tensor::zeros({n}, DType::kF32);
    Tensor dev = cuda::to_device(host, gpu);
    const double h2d =
        bench::median_seconds([&] { bench::do_not_optimize(cuda::to_device(host, gpu)); }, 9);
    const double d2h =
        bench::median_seconds([&] { bench::do_not_optimize(cuda::to_host(dev)); }, 9);
    void* pinned = nullptr;
    cudaMallocHost(&pinned, static_cast<size_t>(bytes));
    std::memset(pinned, 0, static_cast<size_t>(bytes));
    const double h2d_direct = bench::median_seconds(
        [&] {
          cudaMemcpy(dev.raw_data(), pinned, static_cast<size_t>(bytes), cudaMemcpyHostToDevice);
        },
        9);
    const double d2h_direct = bench::median_seconds(
        [&] {
          cudaMemcpy(pinned, dev.raw_data(), static_cast<size_t>(bytes), cudaMemcpyDeviceToHost);
        },
        9);
    cudaFreeHost(pinned);
    bench::report("gpu_copy", {{"dir", "h2d"}, {"impl", "to_device"}, {"mib", mib}},
                  bytes / h2d / 1e9, "GB/s");
    bench::report("gpu_copy", {{"dir", "h2d"}, {"impl", "cudaMemcpy pinned"}, {"mib", mib}},
                  bytes / h2d_direct / 1e9, "GB/s");
    bench::report("gpu_copy", {{"dir", "d2h"}, {"impl", "to_host"}, {"mib", mib}},
                  bytes / d2h / 1e9, "GB/s");
    bench::report("gpu_copy", {{"dir", "d2h"}, {"impl", "cudaMemcpy pinned"}, {"mib", mib}},
                  bytes / d2h_direct / 1e9, "GB/s");
  }
}
