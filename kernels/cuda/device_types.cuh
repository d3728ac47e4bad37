// Device-side element types and the dtype switch of the .cu files. bf16 is kept as its bits and
// converted exactly as the host's BFloat16 does (round to nearest even, NaN kept quiet), so a GPU
// result rounds to the same bf16 as the CPU's.
#pragma once

#include <cstdint>
#include <cstring>

namespace dtensor::kernels::cuda_launch {

struct Bf16 {
  uint16_t bits;
};

__host__ __device__ inline uint32_t bits_of(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
__host__ __device__ inline float float_of(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

__host__ __device__ inline float to_float(Bf16 v) {
  return float_of(static_cast<uint32_t>(v.bits) << 16);
}
__host__ __device__ inline Bf16 to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<uint16_t>(u >> 16)};
}

// The arithmetic type of an element type: bf16 computes in f32.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<Bf16> {
  using type = float;
};
template <typename T>
using Compute = typename ComputeOf<T>::type;

template <typename T>
__device__ inline Compute<T> load(const T* p, int64_t i) {
  return p[i];
}
template <>
__device__ inline float load<Bf16>(const Bf16* p, int64_t i) {
  return to_float(p[i]);
}
template <typename T>
__device__ inline void store(T* p, int64_t i, Compute<T> v) {
  p[i] = v;
}
template <>
__device__ inline void store<Bf16>(Bf16* p, int64_t i, float v) {
  p[i] = to_bf16(v);
}

enum Dt { kF32 = 0, kF64 = 1, kBF16 = 2, kI32 = 3, kI64 = 4, kBool = 5 };

// Calls fn(T{}) for the element type of `dtype`.
template <typename Fn>
inline void visit(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF32:
      return fn(float{});
    case kF64:
      return fn(double{});
    case kBF16:
      return fn(Bf16{});
    case kI32:
      return fn(int32_t{});
    case kI64:
      return fn(int64_t{});
    default:
      return fn(bool{});
  }
}
// The same over the floating types only (f32 for anything else: callers validated).
template <typename Fn>
inline void visit_float(int dtype, Fn&& fn) {
  switch (dtype) {
    case kF64:
      return fn(double{});
    case kBF16:
      return fn(Bf16{});
    default:
      return fn(float{});
  }
}

template <typename T>
inline constexpr bool kIsFloat = false;
template <>
inline constexpr bool kIsFloat<float> = true;
template <>
inline constexpr bool kIsFloat<double> = true;
template <>
inline constexpr bool kIsFloat<Bf16> = true;

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

// A grid-stride loop over [0, n).
#define DTENSOR_FOR_EACH(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

template <typename T>
__device__ inline T max_nan(T a, T b) {
  if constexpr (kIsFloat<T>) {
    return (a != a) ? a : ((b != b) ? b : (a < b ? b : a));
  } else {
    return a < b ? b : a;
  }
}
template <typename T>
__device__ inline T min_nan(T a, T b) {
  if constexpr (kIsFloat<T>) {
    return (a != a) ? a : ((b != b) ? b : (b < a ? b : a));
  } else {
    return b < a ? b : a;
  }
}

// Wrapping integer arithmetic (two's complement), as the CPU kernels do.
template <typename T>
__device__ inline T wrap_add(T a, T b) {
  if constexpr (sizeof(T) == 4 && !kIsFloat<T> && T(-1) < T(0)) {
    return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
  } else if constexpr (sizeof(T) == 8 && !kIsFloat<T> && T(-1) < T(0)) {
    return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  } else {
    return a + b;
  }
}

}  // namespace dtensor::kernels::cuda_launch
