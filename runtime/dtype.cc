#include "runtime/dtype.h"

#include "runtime/error.h"

namespace dtensor {

size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, [](auto v) { return sizeof(v); });
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    if (dtype_name(d) == name) return d;
  }
  throw_error<InvalidArgumentError>(
      "parse_dtype", "unknown dtype '{}' (expected f32, f64, bf16, i32, i64, bool)", name);
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kBF16;
}

bool is_integer(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

}  // namespace dtensor
