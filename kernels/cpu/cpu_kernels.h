// The CPU implementations of the kernel list (kernels/kernel_list.h), with its contracts: CPU
// tensors in host memory, dense row-major; outputs from the host buffer pool. The fronts
// (kernels/kernels.h, kernels/optimizer_update.h) call these directly
// after their checks; CPU kernels call each other directly (no second dispatch). Private to
// //kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "kernels/optimizer_update.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cpu {

// One declaration per line of the list, e.g. `Tensor unary(UnaryOp op, const Tensor& x);`.
#define DTENSOR_DEFAULT(value) = value
#define DTENSOR_CPU_DECLARATION(ret, name, params, args, op, devices, check) ret name params;
#define DTENSOR_KERNEL DTENSOR_CPU_DECLARATION
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_CPU_DECLARATION
#include "kernels/kernel_list.h"
#undef DTENSOR_CPU_DECLARATION

// A host-only helper of the front, with no GPU half.
void set_blas_threads(int n);

}  // namespace dtensor::kernels::cpu
