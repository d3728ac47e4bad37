// The emulated GPU's kernels against the CPU's on the same inputs, on opaque memory
// (DTENSOR_EMULATED_GPUS=2 from the BUILD target).
#include "kernels/emulated/emulated_kernels.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/optimizer_update.h"
#include "runtime/block.h"
#include "runtime/emulated/emulated_gpu.h"
#include "runtime/emulated/opaque_memory.h"
#include "runtime/emulated/segfault_probe.h"
#include "runtime/emulated/transfer.h"

using namespace dtensor;
using Catch::Message;

namespace {

const Device kGpu2{DeviceType::kGPU, 2};

Tensor host_values(const Shape& shape, float step) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = step * static_cast<float>(i % 7 - 3);
  return t;
}

Tensor gpu(const Tensor& host) { return emulated::to_device(host, kGpu2); }

void check_same(const Tensor& on_gpu, const Tensor& on_cpu) {
  REQUIRE(on_gpu.device() == kGpu2);
  CHECK(emulated::is_opaque(on_gpu.raw_data()));
  CHECK_FALSE(emulated::is_open(on_gpu.raw_data()));
  CHECK(bitwise_equal(emulated::to_host(on_gpu), on_cpu));
}

}  // namespace

TEST_CASE("DTENSOR_EMULATED_GPUS fills every entry of the GPU table") {
  REQUIRE(emulated::enabled());
  CHECK(emulated::physical_gpu_count() == 2);
  // Every member of the table is a function pointer: none may be left null.
  using Entry = void (*)();
  static_assert(sizeof(kernels::gpu::Table) % sizeof(Entry) == 0);
  constexpr size_t n = sizeof(kernels::gpu::Table) / sizeof(Entry);
  Entry entries[n];
  std::memcpy(entries, &kernels::gpu::registered_table, sizeof(entries));
  for (size_t i = 0; i < n; ++i) {
    INFO("entry " << i);
    CHECK(entries[i] != nullptr);
  }
}

TEST_CASE("emulated kernels give the CPU kernels' bits on GPU tensors and leave them opaque") {
  const Tensor a = host_values({6, 5}, 0.25f), b = host_values({5, 4}, 0.5f);
  const Tensor ga = gpu(a), gb = gpu(b);
  const int64_t launches = emulated::activate(kGpu2, "test").launches.load();
  check_same(kernels::matmul(ga, gb), kernels::matmul(a, b));
  CHECK(emulated::activate(kGpu2, "test").launches.load() > launches + 1);
  check_same(kernels::unary(kernels::UnaryOp::kTanh, ga), kernels::unary(kernels::UnaryOp::kTanh, a));
  check_same(kernels::binary(kernels::BinaryOp::kMul, ga, ga), kernels::binary(kernels::BinaryOp::kMul, a, a));
  check_same(kernels::reduce(kernels::ReduceKind::kSum, ga, {0}, false),
             kernels::reduce(kernels::ReduceKind::kSum, a, {0}, false));
  check_same(kernels::softmax(ga, 1), kernels::softmax(a, 1));
  check_same(kernels::transpose(ga, {1, 0}), kernels::transpose(a, {1, 0}));
  check_same(kernels::concat({ga, ga}, 0), kernels::concat({a, a}, 0));
  check_same(kernels::cast(ga, DType::kF64), kernels::cast(a, DType::kF64));
  // The CPU kernel may hand back its input (a cast to the same dtype): still the GPU buffer.
  const Tensor same = kernels::cast(ga, DType::kF32);
  CHECK(same.device() == kGpu2);
  CHECK(same.memory_space() == MemorySpace::kGpu);
  const Tensor bias = host_values({4}, 1.0f);
  const Tensor gbias = gpu(bias);
  check_same(kernels::dense(ga, gb, &gbias, kernels::UnaryOp::kRelu),
             kernels::dense(a, b, &bias, kernels::UnaryOp::kRelu));
  const kernels::LayerNormResult ln = kernels::layer_norm(ga, gpu(host_values({5}, 1.0f)),
                                                          gpu(host_values({5}, 0.5f)), 1e-5);
  const kernels::LayerNormResult ln_cpu =
      kernels::layer_norm(a, host_values({5}, 1.0f), host_values({5}, 0.5f), 1e-5);
  check_same(ln.y, ln_cpu.y);
  check_same(ln.rstd, ln_cpu.rstd);
}

TEST_CASE("in-place emulated kernels write the opaque buffer: block copies, reductions, Adam") {
  const Tensor a = host_values({4, 6}, 0.5f);
  Tensor dst = Tensor::zeros({4, 6}, DType::kF32, kGpu2);
  copy_box(gpu(a), {0, 0}, dst, {0, 0}, {4, 6});
  check_same(dst, a);
  const Tensor sum = reduce_tensors({gpu(a), gpu(a), gpu(a)}, ReduceOp::kSum);
  check_same(sum, reduce_tensors({a, a, a}, ReduceOp::kSum));

  Tensor var = gpu(a), m = Tensor::zeros({4, 6}, DType::kF32, kGpu2),
         v = Tensor::zeros({4, 6}, DType::kF32, kGpu2);
  Tensor cvar = a.clone(), cm = Tensor::zeros({4, 6}, DType::kF32),
         cv = Tensor::zeros({4, 6}, DType::kF32);
  const kernels::AdamStepParams p{0.9, 0.999, 0.01, 1e-7, 0.0};
  const Tensor grad = host_values({4, 6}, 0.125f);
  kernels::adam_update(var, gpu(grad), m, v, var, m, v, p);
  kernels::adam_update(cvar, grad, cm, cv, cvar, cm, cv, p);
  check_same(var, cvar);
  check_same(m, cm);
}

TEST_CASE("emulated kernels raise the CPU front's errors word for word") {
  const Tensor a = host_values({2, 3}, 1.0f);
  CHECK_THROWS_WITH(kernels::matmul(gpu(a), gpu(a)), Catch::Contains("[matmul]"));
  std::string cpu_error, gpu_error;
  try {
    kernels::matmul(a, a);
  } catch (const Error& e) {
    cpu_error = e.what();
  }
  try {
    kernels::matmul(gpu(a), gpu(a));
  } catch (const Error& e) {
    gpu_error = e.what();
  }
  // Device tags aside (CPU:2 inside the kernel), the text is the CPU's.
  CHECK_FALSE(gpu_error.empty());
  CHECK(gpu_error.substr(0, 8) == cpu_error.substr(0, 8));
  // The window closes on the way out of a throwing kernel.
  const Tensor g = gpu(a);
  CHECK_THROWS(kernels::matmul(g, g));
  CHECK_FALSE(emulated::is_open(g.raw_data()));
}

TEST_CASE("after a kernel, a host read of its output above the front still crashes") {
  const Tensor out = kernels::unary(kernels::UnaryOp::kRelu, gpu(host_values({64}, 1.0f)));
  const emulated::ProbeResult probe = emulated::run_in_child([&out] {
    volatile const float* shard = out.data<float>();
    static_cast<void>(shard[0]);
  });
  INFO(probe.what);
  CHECK(probe.segfault);
}
