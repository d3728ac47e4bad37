// Elementwise kernels: unary, binary with broadcasting, scale, where, cast, strided copies, fills,
// and the elementwise reductions of the collectives. One thread per output element (grid-stride).
#include <cmath>
#include <type_traits>

#include "kernels/cuda/checked_launch.cuh"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/launch.h"

namespace dtensor::kernels::cuda_launch {
namespace {

// The op codes (launch.h, checked against kernel_types.h by elementwise.cc).
using namespace unary_op;
using namespace binary_op;
using namespace reduce_op;

template <typename C>
__device__ C apply_unary(int op, C v) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case kNeg:
        return -v;
      case kAbs:
        return fabs(v);
      case kExp:
        return exp(v);
      case kLog:
        return log(v);
      case kSqrt:
        return sqrt(v);
      case kRsqrt:
        return C(1) / sqrt(v);
      case kSquare:
        return v * v;
      case kRelu:
        return max_nan(v, C(0));
      case kSigmoid:
        return C(1) / (C(1) + exp(-v));
      case kTanh:
        return tanh(v);
      case kGelu: {
        const C k = C(0.7978845608028654), c = C(0.044715);
        return C(0.5) * v * (C(1) + tanh(k * (v + c * v * v * v)));
      }
      case kReluGrad:
        return v > C(0) ? C(1) : C(0);
      case kSign:
        return v != v ? v : C((v > C(0)) - (v < C(0)));
    }
    return v;
  } else {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case kNeg:
        return static_cast<C>(U(0) - static_cast<U>(v));
      case kAbs:
        return v < 0 ? static_cast<C>(U(0) - static_cast<U>(v)) : v;
      case kSquare:
        return static_cast<C>(static_cast<U>(v) * static_cast<U>(v));
      case kRelu:
        return v > 0 ? v : C(0);
      case kReluGrad:
        return v > 0 ? C(1) : C(0);
      case kSign:
        return C((v > 0) - (v < 0));
    }
    return v;
  }
}

template <typename T>
__global__ void unary_kernel(int op, const T* x, T* y, int64_t n) {
  DTENSOR_FOR_EACH(i, n) { store(y, i, apply_unary<Compute<T>>(op, load(x, i))); }
}

template <typename C>
__device__ C arith(int op, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case kAdd:
        return a + b;
      case kSub:
        return a - b;
      case kMul:
        return a * b;
      case kDiv:
        return a / b;
      case kPow:
        return pow(a, b);
      case kMaximum:
        return max_nan(a, b);
      case kMinimum:
        return min_nan(a, b);
    }
  } else {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case kAdd:
        return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
      case kSub:
        return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
      case kMul:
        return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
      case kDiv:  // the host checked for zero divisors; the lowest value / -1 wraps
        return b == C(-1) ? static_cast<C>(U(0) - static_cast<U>(a)) : (b == 0 ? C(0) : a / b);
      case kMaximum:
        return a < b ? b : a;
      case kMinimum:
        return b < a ? b : a;
    }
  }
  return a;
}

template <typename C>
__device__ bool compare(int op, C a, C b) {
  switch (op) {
    case kEqual:
      return a == b;
    case kNotEqual:
      return a != b;
    case kLess:
      return a < b;
    case kLessEqual:
      return a <= b;
    case kGreater:
      return a > b;
    case kGreaterEqual:
      return a >= b;
    case kLogicalAnd:
      return a && b;
    case kLogicalOr:
      return a || b;
  }
  return false;
}

template <typename T>
__global__ void binary_kernel(int op, const T* a, StridedIndex ia, const T* b, StridedIndex ib,
                              void* out, int64_t n) {
  DTENSOR_FOR_EACH(i, n) {
    const Compute<T> x = load(a, ia.offset(i)), y = load(b, ib.offset(i));
    if (op >= kEqual) {
      static_cast<bool*>(out)[i] = compare(op, x, y);
    } else if constexpr (!std::is_same_v<T, bool>) {
      store(static_cast<T*>(out), i, arith(op, x, y));
    }
  }
}

template <typename T>
__global__ void scale_kernel(const T* x, T* y, int64_t n, Compute<T> alpha) {
  DTENSOR_FOR_EACH(i, n) { store(y, i, alpha * load(x, i)); }
}

template <typename T>
__global__ void where_kernel(const bool* c, StridedIndex ic, const T* a, StridedIndex ia,
                             const T* b, StridedIndex ib, T* out, int64_t n) {
  DTENSOR_FOR_EACH(i, n) { out[i] = c[ic.offset(i)] ? a[ia.offset(i)] : b[ib.offset(i)]; }
}

// Float to integer truncates toward zero and saturates, NaN gives 0 (kernels.h).
template <typename To, typename C>
__device__ To convert(C v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != C(0);
  } else if constexpr (std::is_floating_point_v<C> && std::is_integral_v<To>) {
    if (v != v) return To(0);
    const double d = static_cast<double>(v);
    constexpr double lo = static_cast<double>(sizeof(To) == 4 ? INT32_MIN : INT64_MIN);
    constexpr double hi = -lo;  // 2^31 or 2^63: one past the largest value
    if (d <= lo) return sizeof(To) == 4 ? To(INT32_MIN) : To(INT64_MIN);
    if (d >= hi) return sizeof(To) == 4 ? To(INT32_MAX) : To(INT64_MAX);
    return static_cast<To>(d);
  } else {
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* x, To* y, int64_t n) {
  DTENSOR_FOR_EACH(i, n) {
    if constexpr (std::is_same_v<To, Bf16>) {
      // f64 rounds to f32 first, as the host's BFloat16(float(x)).
      y[i] = to_bf16(static_cast<float>(load(x, i)));
    } else {
      y[i] = convert<To>(load(x, i));
    }
  }
}

template <typename E>
__global__ void strided_copy_kernel(const E* src, StridedIndex is, E* dst, StridedIndex id,
                                    int64_t n) {
  DTENSOR_FOR_EACH(i, n) { dst[id.offset(i)] = src[is.offset(i)]; }
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  DTENSOR_FOR_EACH(i, n) { dst[i] = value; }
}

template <typename T>
__device__ T combine(int op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == kMinOp ? (a && b) : (a || b);
  } else {
    using C = Compute<T>;
    C x, y;
    if constexpr (std::is_same_v<T, Bf16>) {
      x = to_float(a);
      y = to_float(b);
    } else {
      x = a;
      y = b;
    }
    C r = op == kSumOp ? wrap_add(x, y) : (op == kMaxOp ? max_nan(x, y) : min_nan(x, y));
    if constexpr (std::is_same_v<T, Bf16>) {
      return to_bf16(r);
    } else {
      return r;
    }
  }
}

template <typename T>
__global__ void combine_kernel(int op, T* dst, const T* src, int64_t n) {
  DTENSOR_FOR_EACH(i, n) { dst[i] = combine(op, dst[i], src[i]); }
}

struct TreeInputs {
  const void* p[kMaxTreeInputs];
};

// The CPU's pairwise order: [lo, mid) then [mid, hi) with mid = lo + ceil((hi - lo) / 2).
template <typename T>
__device__ T tree(int op, const TreeInputs& in, int lo, int hi, int64_t i) {
  if (hi - lo == 1) return static_cast<const T*>(in.p[lo])[i];
  const int mid = lo + (hi - lo + 1) / 2;
  return combine(op, tree<T>(op, in, lo, mid, i), tree<T>(op, in, mid, hi, i));
}

template <typename T>
__global__ void tree_kernel(int op, T* acc, TreeInputs in, int count, int64_t n) {
  DTENSOR_FOR_EACH(i, n) { acc[i] = tree<T>(op, in, 0, count, i); }
}

template <typename T>
T host_value(double v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return static_cast<T>(v);
  }
}

}  // namespace

void unary(int op, int dtype, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      checked_launch("unary_kernel", unary_kernel<T>, blocks_for(n), kThreads, stream, op,
                     static_cast<const T*>(x), static_cast<T*>(y), n);
    }
  });
}

void binary(int op, int dtype, const void* a, const StridedIndex& ia, const void* b,
            const StridedIndex& ib, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("binary_kernel", binary_kernel<T>, blocks_for(n), kThreads, stream, op,
                   static_cast<const T*>(a), ia, static_cast<const T*>(b), ib, out, n);
  });
}

void scale(int dtype, const void* x, void* y, int64_t n, double alpha, cudaStream_t stream) {
  if (n == 0) return;
  visit_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("scale_kernel", scale_kernel<T>, blocks_for(n), kThreads, stream,
                   static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<Compute<T>>(alpha));
  });
}

void where(const void* cond, const StridedIndex& ic, int dtype, const void* a,
           const StridedIndex& ia, const void* b, const StridedIndex& ib, void* out, int64_t n,
           cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("where_kernel", where_kernel<T>, blocks_for(n), kThreads, stream,
                   static_cast<const bool*>(cond), ic, static_cast<const T*>(a), ia,
                   static_cast<const T*>(b), ib, static_cast<T*>(out), n);
  });
}

void cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  visit(from, [&](auto f) {
    using From = decltype(f);
    visit(to, [&](auto t) {
      using To = decltype(t);
      checked_launch("cast_kernel", cast_kernel<From, To>, blocks_for(n), kThreads, stream,
                     static_cast<const From*>(x), static_cast<To*>(y), n);
    });
  });
}

void strided_copy(int elem_size, const void* src, const StridedIndex& is, void* dst,
                  const StridedIndex& id, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  auto launch = [&](auto zero) {
    using E = decltype(zero);
    checked_launch("strided_copy_kernel", strided_copy_kernel<E>, blocks_for(n), kThreads, stream,
                   static_cast<const E*>(src), is, static_cast<E*>(dst), id, n);
  };
  switch (elem_size) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    default:
      return launch(uint64_t{});
  }
}

void fill(int dtype, void* dst, int64_t n, double value, cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("fill_kernel", fill_kernel<T>, blocks_for(n), kThreads, stream,
                   static_cast<T*>(dst), n, host_value<T>(value));
  });
}

void combine_into(int reduce_op, int dtype, void* dst, const void* src, int64_t n,
                  cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("combine_kernel", combine_kernel<T>, blocks_for(n), kThreads, stream, reduce_op,
                   static_cast<T*>(dst), static_cast<const T*>(src), n);
  });
}

void reduce_tree(int reduce_op, int dtype, void* acc, const void* const* inputs, int count,
                 int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  TreeInputs in{};
  for (int i = 0; i < count; ++i) in.p[i] = inputs[i];
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    checked_launch("tree_kernel", tree_kernel<T>, blocks_for(n), kThreads, stream, reduce_op,
                   static_cast<T*>(acc), in, count, n);
  });
}

}  // namespace dtensor::kernels::cuda_launch
