// Local kernels: the single-device computations that the SPMD op layer runs on every shard. This
// is the device-neutral front, generated from the kernel list (kernels/kernel_list.h, where each
// kernel's name, signature and contract are written once). Each function checks that its tensor
// inputs are on one device type (InvalidArgumentError otherwise, e.g. "[add] inputs are on CPU:0
// and GPU:0 (f32[2,3] and f32[3]); a kernel runs on one device type"), runs the kernel's argument
// checks (kernels/checks.h) and dispatches on the device type to the CPU implementation
// (kernels/cpu/cpu_kernels.h, a direct call) or the entry a GPU backend registered in the GPU
// table (kernels/gpu/gpu_kernels.h); where there is none (a build without CUDA, or a kernel the
// backend lacks) it throws UnimplementedError "[conv2d] has no GPU kernel in this build". The
// enums and option structs are in kernel_types.h.
//
// Contract, common to every function here and to every backend:
// - Inputs are dense row-major Tensors; outputs are new Tensors from the buffer pool
//   (Tensor::empty) tagged with the device of the first tensor argument (scatter_add: of
//   `updates`). No function writes to its inputs, except matmul_accumulate, which adds into `out`
//   in place.
// - Dtypes: f32 and f64 everywhere a float makes sense; bf16 is computed in f32 and rounded to
//   nearest even on output; i32 and i64 where the op is meaningful on integers (integer arithmetic
//   wraps around like unsigned arithmetic, and integer division truncates toward zero); bool for
//   comparison results, where's condition, logical ops, max/min reductions and cast. Floating
//   max/min (binary and reductions) propagate NaN.
// - Errors: user mistakes throw dtensor::Error subclasses whose message starts with "[<op>] " and
//   names the shapes and dtypes involved, e.g. "[matmul] inner dims differ: f32[2,3] x f32[4,5]".
//   ShapeError for shapes that do not fit together, DTypeError for unsupported or mismatched
//   dtypes, InvalidArgumentError for bad axes, indices, labels and other values.
// - Threading: every kernel is single-threaded and stateless, so different threads may run kernels
//   on different tensors concurrently. The exception is matmul (and dense, matmul_accumulate):
//   f32 and bf16 products run through oneDNN (kernels/cpu/matmul_onednn.h), split into up to
//   MatmulOptions::blas_threads blocks on the runtime's thread pool (0: the last set_blas_threads
//   value, else every core), with primitives cached per calling thread; f64 (and the shapes where
//   OpenBLAS measured faster) run inside OpenBLAS and its thread pool, whose thread count is
//   process-global (OpenBLAS 0.3.21), so set it with set_blas_threads (or blas_threads, all
//   devices agreeing on the value) before running devices in parallel. DTENSOR_ONEDNN=0 in the
//   environment keeps every product on OpenBLAS.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/checks.h"
#include "kernels/conv_params.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"
#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels {

// The NumPy broadcast of two shapes; ShapeError naming `op` if they are incompatible.
inline Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  return checks::broadcast_shapes(a, b, op);
}

// Sets OpenBLAS's thread count (n >= 1) if it differs from the last value set through this
// function. The setting is process-global: callers set it before running devices in parallel, and
// concurrent matmuls must agree on it.
inline void set_blas_threads(int n) { cpu::set_blas_threads(n); }

// The kernels, each with its contract: one inline function per line of kernels/kernel_list.h.
#define DTENSOR_DEFAULT(value) = value
#define DTENSOR_KERNEL(ret, name, params, args, op, devices, check) \
  inline ret name params DTENSOR_KERNEL_FRONT(name, args, op, devices, check)
#include "kernels/kernel_list.h"

}  // namespace dtensor::kernels
