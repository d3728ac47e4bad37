// Creating DTensors with a layout. Every shard is produced on its device from the layout alone:
// the global tensor is never materialised, and devices holding the same box share one buffer.
//
// Random values come from a counter-based generator (Philox4x32-10) indexed by the global
// row-major position of each element, so the same seed gives the same global tensor on any mesh
// and layout, and a run on 8 devices matches a run on 1 element for element. This is the
// equivalent of TF DTensor's `call_with_layout(stateless_random_uniform, layout, ...)`.
//
// Under a partial layout the value is built replicated and then made partial (for sum: the first
// device along the partial dims holds it, the others zeros).
#pragma once

#include <cstdint>

#include "dtensor/dtensor.h"

namespace dtensor {

// Errors (named "[fill]" for zeros, ones and fill): ShapeError for a negative dim or more than
// kMaxElements elements (runtime/shape.h), LayoutError if the layout's rank differs from the
// shape's, InvalidArgumentError for a `value` that does not fit `dtype` (integers: whole and in
// range; bool: 0 or 1; floats: within range, infinities and NaN allowed) or a shard that cannot be
// allocated.
DTensor zeros(const Shape& shape, const Layout& layout, DType dtype = DType::kF32);
DTensor ones(const Shape& shape, const Layout& layout, DType dtype = DType::kF32);
DTensor fill(const Shape& shape, const Layout& layout, double value, DType dtype = DType::kF32);

// Uniform in [minval, maxval).
DTensor random_uniform(const Shape& shape, const Layout& layout, uint64_t seed, double minval = 0.0,
                       double maxval = 1.0, DType dtype = DType::kF32);
DTensor random_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean = 0.0,
                      double stddev = 1.0, DType dtype = DType::kF32);
// Normal values redrawn until within two standard deviations of the mean (TF semantics).
DTensor truncated_normal(const Shape& shape, const Layout& layout, uint64_t seed, double mean = 0.0,
                         double stddev = 1.0, DType dtype = DType::kF32);

}  // namespace dtensor
