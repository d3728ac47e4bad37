// Element types of tensors and their properties.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dtensor {

enum class DType : uint8_t { kF32, kF64, kBF16, kI32, kI64, kBool };

// bfloat16: the upper 16 bits of an IEEE float32. Conversion rounds to nearest even.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a quiet NaN.
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
};

// Size of one element in bytes.
size_t dtype_size(DType dtype);
// Short name: "f32", "f64", "bf16", "i32", "i64", "bool".
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; throws InvalidArgumentError for an unknown name.
DType parse_dtype(std::string_view name);
bool is_floating(DType dtype);
bool is_integer(DType dtype);

// The DType of a C++ element type, e.g. dtype_of<float>() == DType::kF32.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBF16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

// Calls fn(T{}) with T the C++ type of dtype: the one place that switches over dtypes.
template <typename Fn>
decltype(auto) visit_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF64:
      return fn(double{});
    case DType::kBF16:
      return fn(BFloat16{});
    case DType::kI32:
      return fn(int32_t{});
    case DType::kI64:
      return fn(int64_t{});
    case DType::kBool:
      return fn(bool{});
  }
  return fn(float{});  // unreachable: every enumerator is handled above
}

}  // namespace dtensor
