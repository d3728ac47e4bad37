// Block operations on host tensors: the data movement under relayout and the collectives.
//
// A *box* is a rectangular region of a row-major tensor, given by its first index per dim and its
// extent. Copies move whole contiguous runs with memcpy. Functions are stateless and thread-safe;
// callers must not write the same destination region from two threads.
#pragma once

#include <vector>

#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

// Copies the box `extent` at `src_begin` of `src` to `dst_begin` of `dst`. Dtypes and ranks must
// agree and the boxes must lie inside both tensors (ShapeError otherwise).
void copy_box(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
              const std::vector<int64_t>& dst_begin, const Shape& extent);

// A new tensor holding the box `extent` at `begin` of `src` (shared zeros for shared zeros).
Tensor slice_box(const Tensor& src, const std::vector<int64_t>& begin, const Shape& extent);

// dst[i] = op(dst[i], src[i]) over elements [begin, end) of two tensors of equal shape and dtype.
// bool uses or for sum and max, and for min.
void reduce_range(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin, int64_t end);
inline void reduce_into(Tensor& dst, const Tensor& src, ReduceOp op) {
  reduce_range(dst, src, op, 0, dst.num_elements());
}

// The elementwise reduction of `inputs` (equal shapes and dtypes, at least one) into a fresh
// tensor, split over the thread pool when large. The order is pairwise and fixed by the number
// of inputs: [0, n) reduces as [0, m) op [m, n) with m = ceil(n/2). A reduction whose members are
// split evenly over two processes (each reducing its half here, then MPI adding the halves)
// therefore gives the same floating-point bits as one over all members in one process.
// Exception: a sum skips shared-zeros inputs (Tensor::shared_zeros) and, when one input is left,
// returns that input itself (the result then shares its storage).
Tensor reduce_tensors(const std::vector<Tensor>& inputs, ReduceOp op);

}  // namespace dtensor
