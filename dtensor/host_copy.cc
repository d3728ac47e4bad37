#include "dtensor/host_copy.h"

#include "runtime/element_loops.h"

namespace dtensor {

Tensor host_readable(const Tensor& t) { return kernels::host_readable(t); }

Tensor on_device(const Tensor& host, const Device& device) {
  return kernels::on_device(host, device);
}

}  // namespace dtensor
