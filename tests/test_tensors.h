// Test helpers: tensors whose values make exact comparisons meaningful.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::testing {

// A tensor of small random integers in [-50, 50] stored as `dtype`: sums of a few of them are
// exact in every dtype, so sharded and single-device results can be compared bit for bit.
Tensor integer_tensor(const Shape& shape, DType dtype, uint64_t seed);

// f32 values uniform in [-1, 1) with every mantissa bit in use: a computation that ran in bf16
// gives other bits than the same one in f32.
Tensor uniform_f32(const Shape& shape, uint64_t seed);

// `global` in `layout`, with non-trivial partial terms: along the partial dims every device holds
// a different term (integer noise), and the terms reduce to `global` (exactly for integer-valued
// data).
DTensor distribute_with_terms(const Tensor& global, const Layout& layout, uint64_t seed);

// Same shape, dtype and layout, and every local shard holds the same bytes.
bool same_bits(const DTensor& a, const DTensor& b);

// The global value of a f32 or f64 tensor, element by element, as doubles.
std::vector<double> global_values(const DTensor& x);

// A copy of every local shard (to check later that a value was not overwritten in place).
DTensor deep_copy(const DTensor& x);

// True when the local shards are views that follow each other, in local order, in one buffer
// (Tensor::joined_view): a row-stacked product's result on a CPU mesh.
bool adjacent_views(const DTensor& x);

}  // namespace dtensor::testing
