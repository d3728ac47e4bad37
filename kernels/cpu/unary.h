// Write-into entry points of the CPU unary kernels and of the f32 <-> bf16 casts, for callers that
// plan their own buffers (the fused elementwise segments of a captured step,
// train/capture/program.h). They run the very element routine unary() (or cast()) runs, so results
// are bitwise theirs. Stateless; thread-safe for distinct outputs.
#pragma once

#include <cstdint>

#include "kernels/kernel_types.h"
#include "runtime/dtype.h"

namespace dtensor::kernels::cpu {

// True if unary_into handles `op` on `dtype`: every dtype unary() accepts except bf16 (which
// unary() widens and rounds per call).
bool unary_into_supported(UnaryOp op, DType dtype);

// y[i] = op(x[i]) for i < n, elements of `dtype`. y may equal x.
void unary_into(UnaryOp op, DType dtype, const void* x, void* y, int64_t n);

// True if cast_into converts `from` to `to`: f32 -> bf16 and bf16 -> f32, the pair cast() runs
// with dedicated loops.
bool cast_into_supported(DType from, DType to);

// y[i] = x[i] converted from `from` to `to` for i < n (f32 -> bf16 rounds to nearest even, as
// cast() does). x and y must not overlap.
void cast_into(DType from, DType to, const void* x, void* y, int64_t n);

}  // namespace dtensor::kernels::cpu
