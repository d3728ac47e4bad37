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

}  // namespace dtensor
