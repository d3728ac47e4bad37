// The convolution kernels on oneDNN: one primitive per geometry (shapes, strides, paddings,
// groups) and dtypes, created on first use and kept in a process-wide cache, so that later calls
// only execute. f32 operands give an f32 result; bf16 operands run bf16 products with f32
// accumulation (brgemm/AVX512_BF16, AMX where the CPU has them) and give a bf16 or an f32
// result, as the caller's output tensor says. Thread-safe: kernels run on pool threads for
// several devices at once; the cache is guarded by a mutex held only to find or insert a
// primitive, and each call executes its own stream with Conv2dParams::threads OpenMP threads (the
// thread budget of ops/expand.h). Private to //kernels.
#pragma once

#include <string>

#include "kernels/conv_params.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cpu::internal {

using kernels::ConvGeometry;

// The three passes, each out = pass(a, b):
//   kForward         y  = conv2d(x, w)                 a = x, b = w
//   kBackwardData    dx = conv2d_backprop_input(w, dy)  a = w, b = dy
//   kBackwardWeights dw = conv2d_backprop_filter(x, dy) a = x, b = dy
enum class ConvPass { kForward, kBackwardData, kBackwardWeights };

// The forward pass's epilogue, post-ops of the same primitive: y = relu?(conv + bias).
struct ConvEpilogue {
  const Tensor* bias = nullptr;  // [o] in out's dtype; null for none
  bool relu = false;
};

// Computes `out` (f32 operands: f32; bf16 operands: bf16 or f32) and returns true, or returns
// false, touching nothing, when oneDNN does not take the geometry and dtypes with an optimised
// kernel (bf16 on a CPU without AVX-512, e.g. under DNNL_MAX_CPU_ISA=AVX2: the caller then runs
// f32, or the direct loop). `epilogue` only with kForward.
bool onednn_conv(ConvPass pass, const Tensor& a, const Tensor& b, Tensor& out,
                 const ConvGeometry& g, const Conv2dParams& p, const ConvEpilogue& epilogue = {});

// The implementation oneDNN reports for the pass ("brgconv:avx512_core_bf16", "jit:avx2", ...), or
// "" when onednn_conv would return false. For the benchmark and tests.
std::string onednn_conv_implementation(ConvPass pass, DType operands, DType out,
                                       const ConvGeometry& g, const Conv2dParams& p);

}  // namespace dtensor::kernels::cpu::internal
