// The CNN kernels (conv2d and its gradients, pooling, LRN) are not written for the GPU yet: a
// CUDA build links these, which throw naming the op, so a CNN on a GPU mesh fails with a clear
// error rather than at link time. (cuDNN or hand-written kernels belong here.)
#include <string>
#include <string_view>

#include "kernels/gpu/gpu_kernels.h"
#include "runtime/error.h"

namespace dtensor::kernels::gpu {
namespace {

[[noreturn]] void not_on_gpu(std::string_view op) {
  throw_error<UnimplementedError>(std::string(op),
                                  "has no GPU kernel yet; run CNN ops on a CPU mesh");
}

}  // namespace

Tensor conv2d(const Tensor&, const Tensor&, const Conv2dParams&) { not_on_gpu("conv2d"); }
Tensor conv2d_backprop_input(const Shape&, const Tensor&, const Tensor&, const Conv2dParams&) {
  not_on_gpu("conv2d_backprop_input");
}
Tensor conv2d_backprop_filter(const Tensor&, const Shape&, const Tensor&, const Conv2dParams&) {
  not_on_gpu("conv2d_backprop_filter");
}
Tensor max_pool2d(const Tensor&, const Pool2dParams&) { not_on_gpu("max_pool2d"); }
Tensor max_pool2d_grad(const Tensor&, const Tensor&, const Pool2dParams&) {
  not_on_gpu("max_pool2d_grad");
}
Tensor avg_pool2d(const Tensor&, const Pool2dParams&) { not_on_gpu("avg_pool2d"); }
Tensor avg_pool2d_grad(const Shape&, const Tensor&, const Pool2dParams&) {
  not_on_gpu("avg_pool2d_grad");
}
Tensor local_response_normalization(const Tensor&, const LrnParams&) {
  not_on_gpu("local_response_normalization");
}
Tensor local_response_normalization_grad(const Tensor&, const Tensor&, const LrnParams&) {
  not_on_gpu("local_response_normalization_grad");
}

}  // namespace dtensor::kernels::gpu
