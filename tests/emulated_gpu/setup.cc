#include "runtime/emulated/emulated_gpu.h"
#include "runtime/error.h"
#include "tests/gpu_mesh_setup.h"

namespace dtensor {

// The emulated GPU registers its collectives itself (and a reset restores them); enabling it
// again here only checks that DTENSOR_EMULATED_GPUS turned it on.
void register_gpu_mesh_collectives() {
  if (!emulated::enabled()) {
    throw_error<UnimplementedError>("register_gpu_mesh_collectives",
                                    "the emulated GPU is off: set {}=N for this test",
                                    emulated::kEnvironmentVariable);
  }
  emulated::enable(emulated::physical_gpu_count());
}

bool gpu_mesh_runs_cpu_kernels() { return true; }

}  // namespace dtensor
