// The TF32 policy of the CUDA matmul: f32 GEMMs use full f32 math unless TF32 tensor cores are
// allowed, by set_cuda_allow_tf32(true) or the environment variable DTENSOR_ALLOW_TF32=1 read at
// the first matmul. TF32 rounds the inputs to 10 mantissa bits (about 1e-3 relative error), which
// the CPU results and the f32 tolerances of the tests do not allow, hence off by default
// (PyTorch's default for matmul since 1.12). Thread-safe (an atomic flag).
#pragma once

namespace dtensor::kernels {

void set_cuda_allow_tf32(bool allow);
bool cuda_tf32_allowed();

}  // namespace dtensor::kernels
