// Write-into entry points of the CPU binary kernels, for callers that plan their own buffers (the
// fused elementwise segments of a captured step, train/capture/program.h). They run the very
// element routine binary() runs, so results are bitwise those of binary(). Stateless; thread-safe
// for distinct outputs.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"
#include "runtime/dtype.h"

namespace dtensor::kernels::cpu {

// True if binary_into handles `op` on `dtype`: the arithmetic ops and pow whose result has the
// operands' dtype, except bf16 (widened and rounded per call) and integer division (which checks
// its divisors first).
bool binary_into_supported(BinaryOp op, DType dtype);

// out[i] = op(a[a_repeats ? 0 : i], b[b_repeats ? 0 : i]) for i < n, elements of `dtype`. `out`
// must not overlap a or b; a and b may be the same.
void binary_into(BinaryOp op, DType dtype, const void* a, bool a_repeats, const void* b,
                 bool b_repeats, void* out, int64_t n);

}  // namespace dtensor::kernels::cpu
