// How the kernel front picks a backend: the machinery shared with the runtime's element loops
// (runtime/device_dispatch.h: the inputs' common device type, the errors, DTENSOR_DEVICE_FRONT),
// the names of the ops that the kernel list codes by an enum, and the body every front function of
// kernels/kernel_list.h has (DTENSOR_KERNEL_FRONT). Private to //kernels.
#pragma once

#include <string_view>

#include "kernels/kernel_types.h"
#include "runtime/device_dispatch.h"

namespace dtensor::kernels {

// Beside the enums, so that the device check (runtime/device_dispatch.h) finds them by
// argument-dependent lookup.
inline std::string_view op_name(UnaryOp op) { return unary_op_name(op); }
inline std::string_view op_name(BinaryOp op) { return binary_op_name(op); }
inline std::string_view op_name(ReduceKind kind) { return reduce_kind_name(kind); }

namespace dispatch {
using kernels::op_name;
}  // namespace dispatch

}  // namespace dtensor::kernels

// The body of the front function of one kernel of kernels/kernel_list.h: the device check, the
// front's check, the direct CPU call or the entry of the registered GPU table. Expanded inside
// namespace dtensor::kernels, after kernels/cpu/cpu_kernels.h and kernels/gpu/gpu_kernels.h.
#define DTENSOR_KERNEL_FRONT(name, args, op, devices, check) \
  DTENSOR_DEVICE_FRONT(name, args, op, devices, check, gpu::Table, &gpu::registered_table)
