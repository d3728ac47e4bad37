// The CIFAR-10 tutorial CNN's training step (examples/cifar10: conv 5x5x64, pool, LRN, conv, LRN,
// pool, dense 384-192-10; loss + L2 weight decay, SGD, moving averages) at global batch 128 of
// 24x24x3 images on GPU meshes batch=1 and batch=8 (logical devices on the first GPU). Compare
// with bench/peers_gpu_cnn_step.py (the same step in PyTorch, cuDNN) on the same GPU right after.
// Each step ends with a device synchronize; medians of 30 steps after 5 warm-up steps. With
// DTENSOR_GPU_PROFILE=1 (kernels/cuda/profile.h) each mesh's line is followed by the profile of
// 10 more steps (the timed steps then carry the profile's events too).
#include <cstdio>
#include <vector>

#include "bench/cnn_training.h"
#include "bench/report.h"
#include "kernels/cuda/profile.h"
#include "runtime/cuda/gpu_collectives.h"
#include "runtime/cuda/gpu_devices.h"

int main() {
  using namespace dtensor;
  if (cuda::physical_gpu_count() == 0) {
    std::fprintf(stderr, "gpu_cnn_step: no GPU visible (%s)\n", cuda::no_gpu_reason().c_str());
    return 1;
  }
  cuda::register_gpu_collectives();
  const int64_t batch = 128;
  for (const char* spec : {"batch=1", "batch=8"}) {
    Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kGPU);
    bench::CnnTraining training(mesh, batch);
    auto step = [&] {
      training.step();
      cuda::synchronize(Device{DeviceType::kGPU, 0});
    };
    const double seconds = bench::median_seconds(step, 30, 5);
    bench::report("gpu_cnn_step", {{"mesh", spec}, {"batch", batch}}, seconds * 1e3, "ms/step");
    if (kernels::gpu::gpu_profile_enabled()) {
      kernels::gpu::reset_gpu_profile();
      for (int i = 0; i < 10; ++i) step();
      std::printf("gpu_cnn_step mesh %s: profile of 10 steps\n", spec);
      kernels::gpu::print_gpu_profile(stdout);
    }
  }
}
