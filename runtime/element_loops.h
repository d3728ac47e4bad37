// The runtime's own element loops: the block copies and reductions under relayout and the
// collectives (runtime/block.h), constant and Philox random fills (creation, runtime/random.h).
// Each is declared by its line of runtime/element_loop_list.h, where its contract is written.
//
// The front (namespace kernels, runtime/element_loops.cc) checks that a loop's tensors share one
// device type (InvalidArgumentError naming the caller's function otherwise), then calls the CPU
// loop directly (runtime/cpu/) or the GPU entry of gpu::ElementLoopTable. That table is the
// element-loop part of the kernel front's GPU table (kernels/gpu/gpu_kernels.h), which points
// gpu::element_loop_table at itself before main; with no table linked, or an empty entry, the
// front throws UnimplementedError "[fill] has no GPU kernel in this build".
//
// The callers validate the arguments. Stateless and thread-safe; callers must not write one
// destination region from two threads.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels {

// The fronts, e.g. `void fill_value(Tensor& dst, double value);`.
#define DTENSOR_ELEMENT_LOOP(ret, name, params, args, op, devices, check) ret name params;
#include "runtime/element_loop_list.h"

// Host reads of device memory for code above the kernel front (a flag, a scalar, a collective's
// shape records): `t` itself when its elements are in host memory (no copy), else a new host
// tensor (CPU:0) through the GPU table's copy_to_host; and `host` (host memory, InternalError
// naming on_device otherwise) on `device`: retagged for a CPU device, else copied through
// copy_to_gpu. Without a GPU backend, device memory throws "[copy_to_host] has no GPU kernel in
// this build" (copy_to_gpu alike). dtensor/host_copy.h offers them above the runtime.
Tensor host_readable(const Tensor& t);
Tensor on_device(const Tensor& host, const Device& device);

namespace cpu {

// The CPU loops (runtime/cpu/), called by the fronts only.
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP

// Philox4x32-10 of one counter: host arithmetic, the same on every device (runtime/random.h).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace cpu

namespace gpu {

// One entry per element loop, named as the loop and of its signature; null where no linked GPU
// backend implements it. kernels/gpu/gpu_kernels.h's gpu::Table derives from it.
struct ElementLoopTable {
#define DTENSOR_ELEMENT_LOOP(ret, name, params, args, op, devices, check) \
  ret(*name) params = nullptr;
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP

  // Host <-> GPU copies (runtime/cuda/transfer.h in a CUDA build), GPU-only: a new tensor on
  // `device` holding `host`'s elements, and a new host tensor (CPU:0) holding a GPU tensor's
  // (host_readable and on_device above; kernels/gpu/gpu_kernels.h copy_to_gpu/copy_to_host).
  Tensor (*copy_to_gpu)(const Tensor& host, const Device& device) = nullptr;
  Tensor (*copy_to_host)(const Tensor& tensor) = nullptr;
};

// The GPU table's element-loop part: null until the GPU table (kernels/gpu/gpu_kernels.cc) sets it
// from a static initializer; only read after that. Constant-initialized.
inline const ElementLoopTable* element_loop_table = nullptr;

}  // namespace gpu

}  // namespace dtensor::kernels
