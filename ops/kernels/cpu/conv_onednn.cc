// Placeholder until the oneDNN primitives land: every geometry goes to the direct loops.
#include "ops/kernels/cpu/conv_onednn.h"

namespace dtensor::kernels::cpu::internal {

bool onednn_conv2d(const Tensor&, const Tensor&, Tensor&, const ConvGeometry&,
                   const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_backprop_input(const Tensor&, const Tensor&, Tensor&, const ConvGeometry&,
                                  const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_backprop_filter(const Tensor&, const Tensor&, Tensor&, const ConvGeometry&,
                                   const Conv2dParams&) {
  return false;
}

}  // namespace dtensor::kernels::cpu::internal
