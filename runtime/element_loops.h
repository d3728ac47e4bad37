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
};

// The GPU table's element-loop part: null until the GPU table (kernels/gpu/gpu_kernels.cc) sets it
// from a static initializer; only read after that. Constant-initialized.
inline const ElementLoopTable* element_loop_table = nullptr;

}  // namespace gpu

}  // namespace dtensor::kernels
