// How the kernel front picks a backend: the common device type of a kernel's tensor inputs, with
// the error for inputs on different device types. Inline: one comparison per input on the hot
// path; the op's name is only computed for the message. Private to //kernels.
#pragma once

#include <string_view>
#include <vector>

#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::dispatch {

inline std::string_view op_name(const char* op) { return op; }
inline std::string_view op_name(UnaryOp op) { return unary_op_name(op); }
inline std::string_view op_name(BinaryOp op) { return binary_op_name(op); }
inline std::string_view op_name(ReduceKind kind) { return reduce_kind_name(kind); }

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

// The same for a non-empty list (concat).
inline DeviceType device_type_of(const char* op, const std::vector<Tensor>& xs) {
  for (const Tensor& x : xs) check_same_type(op, xs.front(), x);
  return xs.front().device().type;
}

// The one switch of the front: `cpu()` for tensors on CPU devices, `gpu()` for GPU devices. Both
// are lambdas the compiler inlines, so a CPU kernel call stays one direct call.
template <typename Cpu, typename Gpu>
inline decltype(auto) on(DeviceType type, Cpu&& cpu, Gpu&& gpu) {
  switch (type) {
    case DeviceType::kCPU:
      return cpu();
    case DeviceType::kGPU:
      break;
  }
  return gpu();
}

}  // namespace dtensor::kernels::dispatch
