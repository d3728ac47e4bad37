// Fills the GPU table from every file's registration (registration.h), then wraps it in the GPU
// profile when DTENSOR_GPU_PROFILE is set (profile.h).
#include "kernels/cuda/registration.h"

#include "kernels/cuda/profile.h"

namespace dtensor::kernels::gpu {
namespace {

[[maybe_unused]] const bool registered = [] {
  Table& table = registered_table;
  register_conv_kernels(table);
  register_elementwise_kernels(table);
  register_matmul_kernels(table);
  register_memory_kernels(table);
  register_nn_kernels(table);
  register_pool_kernels(table);
  register_shape_ops_kernels(table);
  if (profile_requested()) profile_table(table);
  return true;
}();

}  // namespace
}  // namespace dtensor::kernels::gpu
