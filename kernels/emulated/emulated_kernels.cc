#include "kernels/emulated/emulated_kernels.h"

#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "kernels/emulated/host_args.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernels.h"
#include "kernels/optimizer_update.h"
#include "runtime/element_loops.h"
#include "runtime/emulated/emulated_gpu.h"
#include "runtime/emulated/transfer.h"

namespace dtensor::kernels::emulated {
namespace {

// A CPU result as a tensor of the call's GPU device.
Tensor on_gpu(const Tensor& result, Call& call) {
  if (!call.device) return result;
  // The CPU kernel handed back (a view of) an input's storage: already GPU memory.
  if (result.memory_space() == MemorySpace::kGpu) return result.with_device(*call.device);
  Tensor out = Tensor::empty(result.shape(), result.dtype(), *call.device);
  call.window.add(out.raw_data());
  std::memcpy(out.raw_data(), result.raw_data(), result.nbytes());
  return out;
}
LayerNormResult on_gpu(const LayerNormResult& r, Call& call) {
  return {on_gpu(r.y, call), on_gpu(r.mean, call), on_gpu(r.rstd, call)};
}
LayerNormGrad on_gpu(const LayerNormGrad& r, Call& call) {
  return {on_gpu(r.dx, call), on_gpu(r.dgamma, call), on_gpu(r.dbeta, call)};
}

// Emulate<&kernels::f>::call has f's signature and runs f as the header describes.
template <auto Fn>
struct Emulate;

template <typename R, typename... Args, R (*Fn)(Args...)>
struct Emulate<Fn> {
  static R call(Args... args) {
    Call c;
    // A braced list: arguments are converted left to right.
    std::tuple<HostArg<Args>...> host{HostArg<Args>(c, args)...};
    if (c.device) dtensor::emulated::activate(*c.device, "emulated kernel");
    auto run = [](HostArg<Args>&... a) -> R { return Fn(a.get()...); };
    if constexpr (std::is_void_v<R>) {
      std::apply(run, host);
    } else {
      return on_gpu(std::apply(run, host), c);
    }
  }
};

}  // namespace

// Every kernel of the lists (kernels/kernel_list.h, runtime/element_loop_list.h): the front
// function of that name (kernels.h, runtime/element_loops.h, kernels/optimizer_update.h)
// wrapped with the table entry's signature.
void register_kernels() {
  gpu::Table& table = gpu::registered_table;
#define DTENSOR_EMULATE(ret, name, params, args, op, devices, check) \
  table.name = &Emulate<static_cast<decltype(gpu::Table::name)>(&::dtensor::kernels::name)>::call;
#define DTENSOR_KERNEL DTENSOR_EMULATE
#define DTENSOR_ELEMENT_LOOP DTENSOR_EMULATE
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_EMULATE
#include "kernels/kernel_list.h"
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP
#undef DTENSOR_EMULATE
  table.copy_to_gpu = dtensor::emulated::to_device;
  table.copy_to_host = dtensor::emulated::to_host;
}

namespace {

// DTENSOR_EMULATED_GPUS set (even to a bad value, which the runtime reports): fill the table.
[[maybe_unused]] const bool registered = [] {
  if (std::getenv(dtensor::emulated::kEnvironmentVariable) != nullptr) register_kernels();
  return true;
}();

}  // namespace

}  // namespace dtensor::kernels::emulated
