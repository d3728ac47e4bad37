// The f32 convolution kernels on oneDNN: one primitive per geometry (shapes, strides, paddings,
// groups), created on first use and kept in a process-wide cache, so that later calls only
// execute. Thread-safe: kernels run on pool threads for several devices at once; the cache is
// guarded by a mutex held only to find or insert a primitive, and each call executes its own
// stream with Conv2dParams::threads OpenMP threads (the thread budget of ops/expand.h).
// Private to //kernels.
#pragma once

#include "kernels/conv_params.h"
#include "kernels/cpu/conv_direct.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cpu::internal {

// Each computes into the f32 output (dx and dw zero-filled, y uninitialised) and returns true, or
// returns false, touching nothing, when oneDNN does not take the geometry (the caller then runs
// the direct loop).
bool onednn_conv2d(const Tensor& x, const Tensor& w, Tensor& y, const ConvGeometry& g,
                   const Conv2dParams& p);
bool onednn_conv2d_backprop_input(const Tensor& w, const Tensor& dy, Tensor& dx,
                                  const ConvGeometry& g, const Conv2dParams& p);
bool onednn_conv2d_backprop_filter(const Tensor& x, const Tensor& dy, Tensor& dw,
                                   const ConvGeometry& g, const Conv2dParams& p);

}  // namespace dtensor::kernels::cpu::internal
