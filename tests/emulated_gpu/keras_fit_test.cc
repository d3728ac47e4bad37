// Keras-style fit (train/keras) with a MirroredStrategy over an emulated-GPU mesh: the weights
// after two epochs match the same fit on a CPU mesh of the same shape.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

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
