// Small helpers that collective backends share for moving tensors as bytes: the extent before an
// axis, a shape with one dim changed, and byte buffers from the tensor pool.
//
// Free functions over values; thread-safe as Tensor is.
#pragma once

#include <cstdint>

#include "runtime/shape.h"
#include "runtime/tensor.h"

namespace dtensor {

// Product of the dims before `axis`: 1 when chunks along `axis` are contiguous in memory.
inline int64_t leading_extent(const Tensor& t, int64_t axis) {
  int64_t n = 1;
  for (int64_t d = 0; d < axis; ++d) n *= t.dim(d);
  return n;
}

inline Shape with_dim(Shape shape, int64_t axis, int64_t size) {
  shape[static_cast<size_t>(axis)] = size;
  return shape;
}

// A byte tensor from the tensor pool (no zero fill).
inline Tensor byte_buffer(const Shape& shape) { return Tensor::empty(shape, DType::kBool); }

inline char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace dtensor
