#include "runtime/cuda/gpu_collectives.h"
#include "tests/gpu_mesh_setup.h"

namespace dtensor {

void register_gpu_mesh_collectives() { cuda::register_gpu_collectives(); }

bool gpu_mesh_runs_cpu_kernels() { return false; }

}  // namespace dtensor
