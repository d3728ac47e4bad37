// How a device-neutral front picks a backend, shared by the runtime's element loops
// (runtime/element_loops.h) and the kernel front (kernels/dispatch.h): the common device type of
// its tensor inputs, the error for inputs on different device types, the one error for a GPU
// entry that no linked backend filled ("[conv2d] has no GPU kernel in this build"), and the one
// body every front function has (DTENSOR_DEVICE_FRONT). Inline: one comparison per input on the
// hot path; the op's name is only computed for a message. Stateless and thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "runtime/random_spec.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::dispatch {

// The op as errors name it. Ops coded by an enum declare their op_name beside the enum's
// namespace (kernels/dispatch.h), where the checks below find it by argument-dependent lookup.
inline std::string_view op_name(const char* op) { return op; }
// fill_random's errors name the distribution.
inline std::string_view op_name(const RandomSpec& spec) {
  return random_function_name(spec.distribution);
}

// InvalidArgumentError "[op] inputs are on CPU:0 and GPU:0; ...".
[[noreturn]] void throw_mixed_devices(std::string_view op, const Tensor& a, const Tensor& b);
// UnimplementedError "[op] has no GPU kernel in this build".
[[noreturn]] void throw_no_kernel(std::string_view op);

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

// The entry `member` of a GPU table (null: no table linked), or the error naming `op`.
template <typename Table, typename F>
inline F* gpu_entry(const Table* table, F* Table::*member, std::string_view op) {
  F* f = table == nullptr ? nullptr : table->*member;
  if (f == nullptr) throw_no_kernel(op);
  return f;
}

}  // namespace dtensor::kernels::dispatch

#define DTENSOR_KERNEL_UNPAREN(...) __VA_ARGS__

// The body of the front function of one line of a list (kernels/kernel_list.h,
// runtime/element_loop_list.h), from its columns: the device types of `devices` must agree; then
// the front's check; then a direct call of the CPU implementation for CPU tensors, else the entry
// of the GPU table `table` (a `const TableType*`; the front's error where there is none). Expanded
// in a namespace where cpu::name is declared.
#define DTENSOR_DEVICE_FRONT(name, args, op, devices, check, TableType, table)                  \
  {                                                                                              \
    const DeviceType device_type =                                                               \
        ::dtensor::kernels::dispatch::device_type_of(op, DTENSOR_KERNEL_UNPAREN devices);        \
    check;                                                                                       \
    if (device_type == DeviceType::kCPU) return cpu::name args;                                  \
    return ::dtensor::kernels::dispatch::gpu_entry<TableType>(                                   \
        table, &TableType::name, ::dtensor::kernels::dispatch::op_name(op)) args;                \
  }
