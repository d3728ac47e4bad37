// The seed MLP's training step (784-700-500-10, forward, backward, Adam, global batch 128) on GPU
// meshes: batch=1 (one device) and batch=8 (eight logical devices on the first GPU). Compare with
// bench/peers_gpu_step.py (the same step in PyTorch) run on the same GPU right after. Each timed
// step ends with a device synchronize, so queued GPU work is counted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/report.h"
#include "dtensor/creation.h"
#include "examples/mnist/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "runtime/cuda/gpu_collectives.h"
#include "runtime/cuda/gpu_devices.h"
#include "train/optim/optimizers.h"

int main() {
  using namespace dtensor;
  if (cuda::physical_gpu_count() == 0) {
    std::fprintf(stderr, "gpu_train_step: no GPU visible (%s)\n", cuda::no_gpu_reason().c_str());
    return 1;
  }
  cuda::register_gpu_collectives();
  for (const char* spec : {"batch=1", "batch=8"}) {
    Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kGPU);
    examples::Mlp model(mesh, {784, 700, 500, 10}, 22);
    std::vector<DVariable> vars = model.variables();
    Adam optimizer(1e-3);
    DTensor x = random_uniform({128, 784}, model.batch_layout(2), 1);
    DTensor labels =
        cast(scale(random_uniform({128}, model.batch_layout(1), 2), 9.99), DType::kI32);
    auto step = [&] {
      GradientTape tape;
      for (const DVariable& v : vars) tape.watch(v);
      DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(x), labels));
      optimizer.apply(vars, tape.gradient(loss, vars));
      cuda::synchronize(Device{DeviceType::kGPU, 0});
    };
    const double seconds = bench::median_seconds(step, 50, 5);
    bench::report("gpu_train_step", {{"mesh", spec}, {"batch", int64_t{128}}}, seconds * 1e3,
                  "ms/step");
  }
}
