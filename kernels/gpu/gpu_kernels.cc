#include "kernels/gpu/gpu_kernels.h"

#include <string>

#include "runtime/error.h"

namespace dtensor::kernels::gpu {

void throw_no_kernel(std::string_view op) {
  throw_error<UnimplementedError>(std::string(op), "has no GPU kernel in this build");
}

}  // namespace dtensor::kernels::gpu
