// All-reduce bandwidth over the GPUs of this process: the NCCL backend (runtime/nccl) next to
// ncclAllReduce called directly on communicators from ncclCommInitAll, for the seed MLP's
// parameter count (903,810 floats) and 64 MiB. Bus bandwidth as nccl-tests defines it:
// bytes * 2 (k - 1) / k / time. With one GPU both sides are a copy (k = 1).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#include "bench/report.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/nccl/nccl_backend.h"

int main() {
  using namespace dtensor;
  const int k = cuda::physical_gpu_count();
  if (k == 0) {
    std::fprintf(stderr, "gpu_nccl_allreduce: no GPU visible (%s)\n",
                 cuda::no_gpu_reason().c_str());
    return 1;
  }
  Group group;
  std::vector<int> devs;
  for (int d = 0; d < k; ++d) {
    group.devices.push_back(d);
    group.owners.push_back(0);
    devs.push_back(d);
  }
  auto nccl = make_nccl_backend();
  std::vector<ncclComm_t> comms(static_cast<size_t>(k));
  ncclCommInitAll(comms.data(), k, devs.data());
  for (int64_t n : {int64_t{903810}, int64_t{16} << 20}) {
    std::vector<Tensor> in;
    for (int d = 0; d < k; ++d)
      in.push_back(Tensor::zeros({n}, DType::kF32, {DeviceType::kGPU, d}));
    std::vector<Tensor> out;
    for (int d = 0; d < k; ++d)
      out.push_back(Tensor::empty({n}, DType::kF32, {DeviceType::kGPU, d}));
    const double ours = bench::median_seconds(
        [&] { bench::do_not_optimize(nccl->all_reduce(group, in, ReduceOp::kSum)); });
    const double direct = bench::median_seconds([&] {
      ncclGroupStart();
      for (int d = 0; d < k; ++d) {
        ncclAllReduce(in[static_cast<size_t>(d)].raw_data(), out[static_cast<size_t>(d)].raw_data(),
                      static_cast<size_t>(n), ncclFloat32, ncclSum, comms[static_cast<size_t>(d)],
                      cuda::activate({DeviceType::kGPU, d}, "bench"));
      }
      ncclGroupEnd();
      for (int d = 0; d < k; ++d) cuda::synchronize({DeviceType::kGPU, d});
    });
    const double bytes = static_cast<double>(n) * 4;
    const double factor = k > 1 ? 2.0 * (k - 1) / k : 1.0;
    bench::report("gpu_nccl_allreduce",
                  {{"impl", "dtensor NCCL backend"}, {"gpus", int64_t{k}}, {"floats", n}},
                  bytes * factor / ours / 1e9, "GB/s");
    bench::report("gpu_nccl_allreduce",
                  {{"impl", "ncclAllReduce"}, {"gpus", int64_t{k}}, {"floats", n}},
                  bytes * factor / direct / 1e9, "GB/s");
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}
