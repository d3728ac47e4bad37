// How the kernel front picks a backend: the common device type of a kernel's tensor inputs, with
// the error for inputs on different device types, and the one body every front function has
// (DTENSOR_KERNEL_FRONT). Inline: one comparison per input on the hot path; the op's name is only
// computed for the message. Private to //kernels.
#pragma once

#include <string_view>
#include <vector>

#include "kernels/kernel_types.h"
#include "runtime/random_spec.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::dispatch {

inline std::string_view op_name(const char* op) { return op; }
inline std::string_view op_name(UnaryOp op) { return unary_op_name(op); }
inline std::string_view op_name(BinaryOp op) { return binary_op_name(op); }
inline std::string_view op_name(ReduceKind kind) { return reduce_kind_name(kind); }
// fill_random's errors name the distribution.
inline std::string_view op_name(const RandomSpec& spec) {
  switch (spec.distribution) {
    case RandomDistribution::kUniform:
      return "random_uniform";
    case RandomDistribution::kNormal:
      return "random_normal";
    case RandomDistribution::kTruncatedNormal:
      break;
  }
  return "truncated_normal";
}

// InvalidArgumentError "[op] inputs are on CPU:0 and GPU:0; ...".
[[noreturn]] void throw_mixed_devices(std::string_view op, const Tensor& a, const Tensor& b);

template <typename Op>
inline void check_same_type(Op op, const Tensor& first, const Tensor& other) {
  if (other.device().type != first.device().type) throw_mixed_devices(op_name(op), first, other);
}
// An optional input (dense's bias).
template <typename Op>
inline void check_same_type(Op op, const Tensor& first, const Tensor* other) {
  if (other != nullptr) check_same_type(op, first, *other);
}

// The device type of `first`, after checking that every other input has it too.
template <typename Op, typename... Rest>
inline DeviceType device_type_of(Op op, const Tensor& first, const Rest&... rest) {
  (check_same_type(op, first, rest), ...);
  static_cast<void>(op);  // unused for one input
  return first.device().type;
}

// The same for one tensor and a list (reduce_tensors).
inline DeviceType device_type_of(const char* op, const Tensor& first,
                                 const std::vector<Tensor>& rest) {
  for (const Tensor& x : rest) check_same_type(op, first, x);
  return first.device().type;
}

// The same for a list (concat); CPU for an empty one, whose error is the CPU kernel's.
inline DeviceType device_type_of(const char* op, const std::vector<Tensor>& xs) {
  if (xs.empty()) return DeviceType::kCPU;
  for (const Tensor& x : xs) check_same_type(op, xs.front(), x);
  return xs.front().device().type;
}

}  // namespace dtensor::kernels::dispatch

#define DTENSOR_KERNEL_UNPAREN(...) __VA_ARGS__

// The body of the front function of one kernel of kernels/kernel_list.h, from its columns: the
// device types of `devices` must agree; then the front's check; then a direct call of the CPU
// implementation for CPU tensors, else the GPU table's entry (gpu::kernel throws the front's
// error "[op] has no GPU kernel in this build" where there is none). Expanded inside namespace
// dtensor::kernels, after kernels/cpu/cpu_kernels.h and kernels/gpu/gpu_kernels.h.
#define DTENSOR_KERNEL_FRONT(name, args, op, devices, check)                             \
  {                                                                                      \
    const DeviceType device_type =                                                       \
        ::dtensor::kernels::dispatch::device_type_of(op, DTENSOR_KERNEL_UNPAREN devices); \
    check;                                                                               \
    if (device_type == DeviceType::kCPU) return cpu::name args;                          \
    return gpu::kernel(&gpu::Table::name, ::dtensor::kernels::dispatch::op_name(op)) args; \
  }
