// exp and tanh for f32 written as straight-line arithmetic (range reduction, polynomial, exponent
// bits) so that loops calling them vectorize; glibc's expf/tanhf are opaque calls. Both stay
// within a few ulp of the correctly rounded result (checked in kernels_test against std::exp and
// std::tanh), handle NaN, +-inf, overflow and gradual underflow. f64 keeps the C library.
// Private to //kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dtensor::kernels::cpu::internal {

// 2^n for integer n in [-126, 127], built from the exponent bits.
inline float pow2i(int32_t n) {
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline float exp_f32(float x) {
  // Clamp (NaN goes to the lower bound here and is restored at the end) so that n stays small:
  // beyond these bounds the scaling below overflows to inf or underflows to 0 anyway.
  float c = x > -110.0f ? x : -110.0f;
  c = c < 90.0f ? c : 90.0f;
  // n = round(c / ln 2) with the 1.5 * 2^23 trick (round to nearest, no SSE4.1 needed).
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;
  const float n = (c * kLog2e + kRound) - kRound;
  // r = c - n ln2 in two parts (Cody-Waite), |r| <= ln2 / 2.
  const float r = (c - n * 0.693359375f) - n * -2.12194440e-4f;
  // Cephes expf polynomial.
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // Scale by 2^n as 2^(n/2) * 2^(n - n/2): both factors are normal floats for n in
  // [-160, 130], so results in the subnormal range round once, and large n overflow to inf.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni / 2;
  const float y = p * pow2i(half) * pow2i(ni - half);
  return x != x ? x : y;
}

inline float tanh_f32(float x) {
  const float ax = std::abs(x);
  // Small |x|: Cephes tanhf odd polynomial (no cancellation near 0).
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  // Larger |x|: 1 - 2 / (exp(2|x|) + 1), with the sign of x; exp overflow gives exactly 1.
  const float large_abs = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  const float large = x < 0.0f ? -large_abs : large_abs;
  return ax < 0.625f || x != x ? small : large;
}

// exp and tanh for the kernels' element types: the fast f32 versions, the C library otherwise.
template <typename T>
inline T exp_t(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

template <typename T>
inline T tanh_t(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return tanh_f32(x);
  } else {
    return std::tanh(x);
  }
}

}  // namespace dtensor::kernels::cpu::internal
