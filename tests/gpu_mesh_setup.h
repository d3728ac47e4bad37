// The backend-specific steps of the GPU mesh tests (gpu_mesh_test.cc, batch_bits_test.cc):
// installing the GPU backend's in-process collectives, and what its kernels are. Defined once per
// backend: gpu_mesh_cuda_setup.cc (CUDA) and emulated_gpu/setup.cc (the emulated GPU).
#pragma once

namespace dtensor {

void register_gpu_mesh_collectives();

// True where the GPU backend's kernels are the CPU's (the emulated GPU): its results must then be
// the CPU's bit for bit; false on CUDA (cuBLAS and the CUDA kernels round differently).
bool gpu_mesh_runs_cpu_kernels();

}  // namespace dtensor
