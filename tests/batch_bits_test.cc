// The same bits on every mesh: one training step of the MNIST MLP (784-700-500-10, Adam, a batch
// of 128) on batch=1 and batch=8 meshes of logical devices gives the same logits, loss, gradients
// and updated variables, bit for bit, on the CPU and on the GPU backend the binary registers
// (tests/gpu_mesh_setup.h). Where the GPU's kernels are the CPU's (the emulated GPU), the GPU
// meshes also give the CPU mesh's bits. Device-neutral: CUDA runs it as :batch_bits_gpu_test,
// the emulated GPU as //tests/emulated_gpu:batch_bits_test.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dtensor/virtual_devices.h"
#include "examples/mnist/model.h"
#include "kernels/gpu/gpu_kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/gpu_mesh_setup.h"
#include "train/optim/optimizers.h"

using namespace dtensor;

namespace {

constexpr int64_t kBatch = 128;

// Every value of a step, read back to the host in a fixed order, with its name.
struct StepValues {
  std::vector<std::string> names;
  std::vector<Tensor> values;
  void add(const std::string& name, const DTensor& t) {
    Tensor g = to_global(t);
    if (g.device().type != DeviceType::kCPU) g = kernels::gpu::copy_to_host(g);
    names.push_back(name);
    values.push_back(g);
  }
};

DTensor put(const Tensor& host, const Layout& layout) {
  if (layout.mesh().device_type() == DeviceType::kCPU) return distribute(host, layout);
  return distribute(kernels::gpu::copy_to_gpu(host, mesh_device(layout.mesh(), 0)), layout);
}

StepValues mlp_step(int64_t devices, DeviceType type) {
  configure_virtual_cpus(devices);
  if (type == DeviceType::kGPU) register_gpu_mesh_collectives();
  const Mesh mesh = create_mesh({{"batch", devices}}, type);
  std::mt19937_64 rng(7);
  Tensor images = Tensor::empty({kBatch, 784}, DType::kF32);
  for (int64_t i = 0; i < images.num_elements(); ++i) {
    images.data<float>()[i] = static_cast<float>(rng() % 256) / 255.0f;
  }
  Tensor labels = Tensor::empty({kBatch}, DType::kI32);
  for (int64_t i = 0; i < kBatch; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
  examples::Mlp model(mesh, {784, 700, 500, 10}, 22);
  std::vector<DVariable> vars = model.variables();
  const DTensor x = put(images, model.batch_layout(2));
  const DTensor y = put(labels, model.batch_layout(1));
  StepValues out;
  Adam optimizer(1e-3);
  for (int step = 0; step < 2; ++step) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    DTensor logits = model(x);
    DTensor loss = reduce_mean(sparse_softmax_cross_entropy(logits, y));
    std::vector<DTensor> grads = tape.gradient(loss, vars);
    const std::string at = " (step " + std::to_string(step) + ")";
    out.add("logits" + at, logits);
    out.add("loss" + at, loss);
    out.add("loss sum" + at, reduce_sum(sparse_softmax_cross_entropy(logits, y)));
    for (size_t i = 0; i < grads.size(); ++i)
      out.add("gradient of " + vars[i].name() + at, grads[i]);
    optimizer.apply(vars, grads);
    for (const DVariable& v : vars) out.add(v.name() + " after" + at, v.value());
  }
  return out;
}

// Each value where `b` differs from `a` in any bit fails, naming its first differing element.
void check_same_bits(const StepValues& a, const StepValues& b, const std::string& what) {
  INFO(what);
  REQUIRE(a.values.size() == b.values.size());
  for (size_t v = 0; v < a.values.size(); ++v) {
    const Tensor& x = a.values[v];
    const Tensor& z = b.values[v];
    REQUIRE(x.shape() == z.shape());
    const auto* p = static_cast<const float*>(x.raw_data());
    const auto* q = static_cast<const float*>(z.raw_data());
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      if (std::memcmp(p + i, q + i, sizeof(float)) != 0) {
        FAIL_CHECK(a.names[v] << ", element " << i << ": " << p[i] << " vs " << q[i]);
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE("an MLP step gives the same bits on batch=1 and batch=8 meshes", "[bits]") {
  const StepValues cpu1 = mlp_step(1, DeviceType::kCPU);
  const StepValues cpu8 = mlp_step(8, DeviceType::kCPU);
  check_same_bits(cpu1, cpu8, "CPU batch=1 vs CPU batch=8");
  const StepValues gpu1 = mlp_step(1, DeviceType::kGPU);
  const StepValues gpu8 = mlp_step(8, DeviceType::kGPU);
  if (gpu_mesh_runs_cpu_kernels()) {
    check_same_bits(cpu1, gpu1, "CPU batch=1 vs GPU batch=1");
    check_same_bits(cpu8, gpu8, "CPU batch=8 vs GPU batch=8");
  }
  check_same_bits(gpu1, gpu8, "GPU batch=1 vs GPU batch=8");
}
