#include "runtime/device_dispatch.h"

#include <string>

#include "runtime/error.h"

namespace dtensor::kernels::dispatch {

void throw_mixed_devices(std::string_view op, const Tensor& a, const Tensor& b) {
  throw_error<InvalidArgumentError>(
      std::string(op), "inputs are on {} and {} ({}{} and {}{}); a kernel runs on one device type",
      device_to_string(a.device()), device_to_string(b.device()), dtype_name(a.dtype()),
      shape_to_string(a.shape()), dtype_name(b.dtype()), shape_to_string(b.shape()));
}

void throw_no_kernel(std::string_view op) {
  throw_error<UnimplementedError>(std::string(op), "has no GPU kernel in this build");
}

}  // namespace dtensor::kernels::dispatch
