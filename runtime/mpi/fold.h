// The elementwise fold that the MPI backend's own reductions use (the shared-memory reducer, the
// host-aware reduction): a op b for one element, folding one tensor into another, and the
// identity of an op, so that every path that defines an order of terms combines them alike.
//
// bool: or for sum and max, and for min; integers wrap, as MPI_SUM does on these machines; float
// max and min propagate NaN; bf16 combines in f32 (fold_into rounds once per call).
//
// Free functions over values; thread-safe as Tensor is.
#pragma once

#include <limits>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

template <typename T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMin ? (a && b) : (a || b);
  } else {
    if (op == ReduceOp::kMax) return max_propagating_nan(a, b);
    if (op == ReduceOp::kMin) return min_propagating_nan(a, b);
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
}

// acc[i] = acc[i] op next[i] (same shape and dtype; acc written in place).
void fold_into(Tensor& acc, const Tensor& next, ReduceOp op);

// A tensor like `like` holding the identity of `op`: x op identity == x, bit for bit, for every
// x (sum: -0.0 for floats, so that -0.0 stays -0.0; max: -inf or the lowest value; min: +inf or
// the highest; bool: false, and true for min).
Tensor identity_like(const Tensor& like, ReduceOp op);

}  // namespace dtensor
