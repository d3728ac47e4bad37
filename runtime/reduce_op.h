// Reduction operators shared by partial layouts, collectives and reduce kernels.
#pragma once

#include <cstdint>
#include <string_view>

namespace dtensor {

enum class ReduceOp : uint8_t { kSum, kMax, kMin };

// "sum", "max", "min": the spelling used in layout strings and messages.
constexpr std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

// The max and min that partial values, collectives and reduce kernels combine with: a NaN operand
// wins whichever side it is on (numpy, TF and JAX semantics), so a NaN survives a reduction
// whichever device holds it and in any order. std::max/std::min keep the first operand when the
// second is NaN. For integers these are the plain max and min.
template <typename T>
constexpr T max_propagating_nan(T a, T b) {
  return (a > b || a != a) ? a : b;  // a != a: a is NaN
}
template <typename T>
constexpr T min_propagating_nan(T a, T b) {
  return (a < b || a != a) ? a : b;
}

}  // namespace dtensor
