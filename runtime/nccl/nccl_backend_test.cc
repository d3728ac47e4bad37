// The NCCL backend in one process: collectives over one device per visible physical GPU, checked
// against host arithmetic, and the refusal of two logical devices of one GPU. Skips with one line
// without a GPU (runtime/cuda/gpu_test_main.cc).
#include "runtime/nccl/nccl_backend.h"

#include <catch2/catch.hpp>

#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

using namespace dtensor;

namespace {

Tensor filled(int64_t n, float base, const Device& device) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = base + static_cast<float>(i);
  return cuda::to_device(t, device);
}

// One member per physical GPU, all in this process.
Group local_group() {
  Group g;
  for (int64_t d = 0; d < cuda::physical_gpu_count(); ++d) {
    g.devices.push_back(d);
    g.owners.push_back(0);
  }
  return g;
}

}  // namespace

TEST_CASE("NCCL all-reduce, all-gather and broadcast over this process's GPUs") {
  auto nccl = make_nccl_backend();
  const Group g = local_group();
  std::vector<Tensor> in;
  for (int64_t d : g.devices)
    in.push_back(filled(1000, static_cast<float>(d), {DeviceType::kGPU, d}));
  const int64_t k = g.size();
  std::vector<Tensor> sum = nccl->all_reduce(g, in, ReduceOp::kSum);
  for (const Tensor& s : sum) {
    Tensor h = cuda::to_host(s);
    for (int64_t i = 0; i < 1000; ++i) {
      CHECK(h.data<float>()[i] == static_cast<float>(k * i + k * (k - 1) / 2));
    }
  }
  std::vector<Tensor> gathered = nccl->all_gather(g, in, 0);
  CHECK(gathered[0].shape() == Shape{1000 * k});
  std::vector<Tensor> b = nccl->broadcast(g, in, 0);
  CHECK(bitwise_equal(cuda::to_host(b[0]), cuda::to_host(in[0])));
  nccl->barrier(g);
}

TEST_CASE("NCCL refuses two logical devices of one GPU, naming them") {
  auto nccl = make_nccl_backend();
  const int64_t count = cuda::physical_gpu_count();
  Group g{{0, count}, {0, 0}, 0};
  std::vector<Tensor> in = {filled(4, 0, {DeviceType::kGPU, 0}),
                            filled(4, 0, {DeviceType::kGPU, count})};
  CHECK_THROWS_WITH(nccl->all_reduce(g, in, ReduceOp::kSum),
                    Catch::Contains("are logical devices of one GPU (0); NCCL needs one rank per "
                                    "GPU"));
}
