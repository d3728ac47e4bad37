// How an emulated kernel hands its arguments to the CPU front: each tensor argument retagged as
// the CPU device of the same id (same storage), with its buffer opened for the call. Private to
// //kernels/emulated.
#pragma once

#include <optional>
#include <vector>

#include "runtime/emulated/opaque_memory.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::emulated {

// The state of one wrapped call: the open window, and the GPU device of its first tensor argument
// (where results go).
struct Call {
  dtensor::emulated::OpenWindow window;
  std::optional<Device> device;

  Tensor host(const Tensor& t) {
    window.add(t.raw_data());
    if (t.device().type != DeviceType::kGPU) return t;
    if (!device) device = t.device();
    return t.with_device(Device{DeviceType::kCPU, t.device().id});
  }
};

// Non-tensor arguments pass through as they are.
template <typename T>
struct HostArg {
  HostArg(Call&, T value) : value(static_cast<T>(value)) {}
  T value;
  T get() { return static_cast<T>(value); }
};

template <>
struct HostArg<const Tensor&> {
  HostArg(Call& call, const Tensor& t) : host(call.host(t)) {}
  Tensor host;
  const Tensor& get() { return host; }
};

// Written in place: the host handle shares the GPU tensor's storage, so the CPU kernel's writes
// land in it.
template <>
struct HostArg<Tensor&> {
  HostArg(Call& call, Tensor& t) : host(call.host(t)) {}
  Tensor host;
  Tensor& get() { return host; }
};

template <>
struct HostArg<const Tensor*> {
  HostArg(Call& call, const Tensor* t) {
    if (t != nullptr) host = call.host(*t);
  }
  std::optional<Tensor> host;
  const Tensor* get() { return host ? &*host : nullptr; }
};

template <>
struct HostArg<const std::vector<Tensor>&> {
  HostArg(Call& call, const std::vector<Tensor>& ts) {
    host.reserve(ts.size());
    for (const Tensor& t : ts) host.push_back(call.host(t));
  }
  std::vector<Tensor> host;
  const std::vector<Tensor>& get() { return host; }
};

}  // namespace dtensor::kernels::emulated
