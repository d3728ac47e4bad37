// The CPU implementations of the kernel list (kernels/kernel_list.h), with its contracts: CPU
// tensors in host memory, dense row-major; outputs from the host buffer pool. The fronts
// (kernels/kernels.h, runtime/element_loops.h, kernels/optimizer_update.h) call these directly
// after their checks; CPU kernels call each other directly (no second dispatch). Private to
// //kernels.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "kernels/optimizer_update.h"
#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cpu {

// One declaration per line of the list, e.g. `Tensor unary(UnaryOp op, const Tensor& x);`.
#define DTENSOR_DEFAULT(value) = value
#define DTENSOR_CPU_DECLARATION(ret, name, params, args, op, devices, check) ret name params;
#define DTENSOR_KERNEL DTENSOR_CPU_DECLARATION
#define DTENSOR_ELEMENT_LOOP DTENSOR_CPU_DECLARATION
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_CPU_DECLARATION
#include "kernels/kernel_list.h"
#undef DTENSOR_CPU_DECLARATION

// Host-only helpers of the fronts, with no GPU half.
void set_blas_threads(int n);
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace dtensor::kernels::cpu
