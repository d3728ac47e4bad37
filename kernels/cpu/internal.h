// Helpers shared by the kernel files: message formatting, axis handling, element conversion and
// wrapping integer arithmetic. Private to //kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/checks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_types.h"
#include "runtime/shape.h"
#include "runtime/thread_pool.h"

namespace dtensor::kernels::cpu::internal {

// "f32[2,3]" (kernels/kernel_types.h).
using kernels::describe;
// The multi-index of flat position `flat` in `shape`, as "[1,0,2]".
std::string position_to_string(int64_t flat, const Shape& shape);

// The shared argument checks (kernels/checks.h).
using checks::check_index_dtype;
using checks::normalize_axis;
using checks::throw_unsupported;
using checks::try_broadcast_shapes;
using checks::unary_supports;

// A shape seen as [outer, n, inner] around one axis.
struct AxisView {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};
AxisView view_around_axis(const Shape& shape, int64_t axis);

// The shape with dim `axis` removed (keepdims false) or set to 1 (keepdims true).
Shape reduced_shape(const Shape& shape, int64_t axis, bool keepdims);

// True if `from` broadcasts to `to` (NumPy rules).
bool broadcasts_to(const Shape& from, const Shape& to);

// bf16 <-> f32 for whole tensors: the way every kernel supports bf16.
Tensor bf16_to_f32(const Tensor& x);
Tensor f32_to_bf16(const Tensor& x);
// The element loops behind them (also cast_into's, unary.h): widening is exact; rounding is to
// nearest even, NaN kept quiet with its sign. Buffers must not overlap.
void widen_bf16(const BFloat16* src, float* dst, int64_t n);
void round_to_bf16(const float* src, BFloat16* dst, int64_t n);

// Applies a unary op in place to an f32/f64/i32/i64 tensor whose dtype supports it (dense's fused
// activation).
void unary_in_place(UnaryOp op, Tensor& t);

// Calls fn(T{}) for the f32, f64, i32 and i64 element types; anything else is a bug in the caller
// (dtypes are validated first) and throws InternalError.
template <typename Fn>
decltype(auto) visit_numeric(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF64:
      return fn(double{});
    case DType::kI32:
      return fn(int32_t{});
    case DType::kI64:
      return fn(int64_t{});
    default:
      break;
  }
  DTENSOR_CHECK(false && "dtype was validated before dispatch");
  return fn(float{});
}

// Calls fn(T{}) for f32 and f64 only (InternalError otherwise).
template <typename Fn>
decltype(auto) visit_float(DType dtype, Fn&& fn) {
  if (dtype == DType::kF64) return fn(double{});
  DTENSOR_CHECK(dtype == DType::kF32);
  return fn(float{});
}

// Calls fn(T{}) with T the unsigned integer type of `size` bytes (1, 2, 4 or 8): for kernels that
// only move elements.
template <typename Fn>
decltype(auto) visit_element_size(size_t size, Fn&& fn) {
  switch (size) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    default:
      return fn(uint64_t{});
  }
}

// Integer arithmetic that wraps around instead of overflowing (signed overflow is UB in C++).
template <typename T>
inline T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <typename T>
inline T wrap_neg(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U{0} - static_cast<U>(a));
}

// a + b, a * b and -a that wrap for integers and are plain for floats.
template <typename T>
inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return wrap_add(a, b);
  } else {
    return a + b;
  }
}
template <typename T>
inline T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return wrap_mul(a, b);
  } else {
    return a * b;
  }
}

// max/min that propagate NaN for floats.
template <typename T>
inline T max_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (a > b || a != a) ? a : b;
  } else {
    return a > b ? a : b;
  }
}
template <typename T>
inline T min_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (a < b || a != a) ? a : b;
  } else {
    return a < b ? a : b;
  }
}

// Runs fn(begin, end) over [0, n) in one block per thread of ThreadPool::global(), or whole on
// the calling thread when `work` (elements touched; a double, so that no estimate overflows) is
// too small to be worth waking the pool, or when called from a pool task (a device's shard: the
// devices already share the cores). The blocks are disjoint, so a kernel whose items write
// disjoint outputs gives the same bits either way.
template <typename Fn>
void for_blocks(int64_t n, double work, Fn&& fn) {
  constexpr double kMinParallelWork = 1 << 16;
  ThreadPool& pool = ThreadPool::global();
  const int64_t blocks = std::min<int64_t>(n, pool.num_threads());
  if (blocks <= 1 || work < kMinParallelWork || ThreadPool::in_worker()) {
    fn(int64_t{0}, n);
    return;
  }
  pool.parallel_for(blocks, [&](int64_t i) {
    const ShardRange r = chunk_range(n, blocks, i);
    fn(r.offset, r.offset + r.size);
  });
}

// Reduces map(x[0..n)) with kLanes independent accumulators combined as a tree at the end: the
// compiler keeps the lanes in vector registers (a single accumulator would be a serial chain, and
// float addition may not be reordered), and the order is fixed, so results are deterministic.
template <typename Acc, typename T, typename Op, typename Map>
Acc reduce_lanes(const T* __restrict x, int64_t n, Acc init, Op op, Map map) {
  constexpr int kLanes = 16;
  Acc lanes[kLanes];
  for (int j = 0; j < kLanes; ++j) lanes[j] = init;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lanes[j] = op(lanes[j], map(x[i + j]));
  }
  for (int j = 0; i < n; ++i, ++j) lanes[j] = op(lanes[j], map(x[i]));
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lanes[j] = op(lanes[j], lanes[j + width]);
  }
  return lanes[0];
}

// The f64 sum of x[0..n) (for floats) with independent lanes.
template <typename T>
double sum_f64(const T* x, int64_t n) {
  return reduce_lanes(
      x, n, 0.0, [](double a, double b) { return a + b; },
      [](T v) { return static_cast<double>(v); });
}

// double -> bf16 rounding to nearest even without double rounding: round to f32 with
// round-to-odd first (keeps the sticky bit), then to bf16.
inline BFloat16 double_to_bf16(double v) {
  float f = static_cast<float>(v);
  if (std::isfinite(f) && static_cast<double>(f) != v) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    if ((u & 1u) == 0) {
      f = std::nextafter(f, static_cast<float>(v > static_cast<double>(f) ? INFINITY : -INFINITY));
    }
  }
  return BFloat16(f);
}

// One element converted the way cast() defines: float to integer truncates and saturates (NaN is
// 0), to bool is != 0, bf16 goes through f32 (f64 rounds once).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      return double_to_bf16(v);
    } else {
      return BFloat16(static_cast<float>(v));
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From{0};
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());  // -2^(bits-1), exact
    if (!(v == v)) return To{0};
    if (v <= lo) return std::numeric_limits<To>::min();
    if (v >= -lo) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace dtensor::kernels::cpu::internal
