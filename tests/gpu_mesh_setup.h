// The one backend-specific step of the GPU mesh tests (gpu_mesh_test.cc): installing the GPU
// backend's in-process collectives. Defined once per backend: gpu_mesh_cuda_setup.cc (CUDA) and
// emulated_gpu/setup.cc (the emulated GPU).
#pragma once

namespace dtensor {

void register_gpu_mesh_collectives();

}  // namespace dtensor
