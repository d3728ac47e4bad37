// Keras-style fit (train/keras) with a MirroredStrategy over an emulated-GPU mesh: the weights
// after two epochs match the same fit on a CPU mesh of the same shape. And the Dataset's batches
// on GPU meshes (shuffled, mapped, prefetched) hold what the CPU mesh's do: assembled on the host,
// then copied onto each device; a host write into a GPU shard would crash here.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/host_copy.h"
#include "dtensor/virtual_devices.h"
#include "kernels/gpu/gpu_kernels.h"
#include "train/keras/test_problem.h"

using namespace dtensor;
using namespace dtensor::keras;
using namespace dtensor::keras::testing;

TEST_CASE("fit on an emulated-GPU MirroredStrategy matches fit on CPUs") {
  configure_virtual_cpus(4);
  auto fit = [](DeviceType type) {
    Problem p(std::make_shared<MirroredStrategy>(create_mesh("batch=4", type), "batch"));
    p.trainer.fit(p.train, quiet(2));
    std::vector<Tensor> host;
    for (const Tensor& w : p.weights()) {
      host.push_back(w.device().type == DeviceType::kGPU ? kernels::gpu::copy_to_host(w) : w);
    }
    return host;
  };
  const std::vector<Tensor> cpu = fit(DeviceType::kCPU), gpu = fit(DeviceType::kGPU);
  CHECK(same_bits(gpu, cpu));
}

TEST_CASE("Dataset batches on emulated-GPU meshes hold the CPU mesh's, prefetched and mapped") {
  configure_virtual_cpus(4);
  const data::MnistSplit digits = data::synthetic_digits(22, 3);
  auto batches = [&](const char* dims, DeviceType type, int64_t prefetch) {
    data::Dataset ds(digits.images, digits.labels, create_mesh(dims, type), "batch");
    ds.shuffle(5).batch(8).repeat(2).prefetch(prefetch).map([](Tensor features, Tensor labels) {
      features.data<float>()[0] += 1.0f;  // host memory, before the copies onto GPUs
      labels.data<int32_t>()[0] = 9;
    });
    std::vector<Tensor> out;
    while (std::optional<data::Batch> b = ds.next()) {
      for (const DTensor* t : {&b->features, &b->labels}) {
        CHECK(t->layout().mesh().device_type() == type);
        out.push_back(host_readable(to_global(*t)));
      }
    }
    return out;
  };
  for (const char* dims : {"batch=2,model=2", "batch=4"}) {
    const std::vector<Tensor> cpu = batches(dims, DeviceType::kCPU, 0);
    CHECK(cpu.size() == 12);  // 3 batches (8, 8, 6) of 2 epochs, features and labels
    for (int64_t prefetch : {0, 2}) {
      INFO(dims << " prefetch " << prefetch);
      CHECK(same_bits(batches(dims, DeviceType::kGPU, prefetch), cpu));
    }
  }
}
