// Elementwise unary ops.
#include <cmath>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/unary.h"
#include "runtime/elementwise_notes.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

// y may alias x (in-place activation), so no __restrict: the compiler checks overlap once.
template <typename T, typename F>
void map(const T* x, T* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

void check_dtype(UnaryOp op, const Tensor& x) {
  if (!internal::unary_supports(op, x.dtype())) {
    internal::throw_unsupported(std::string(unary_op_name(op)).c_str(), x);
  }
}

template <typename T>
void apply(UnaryOp op, const T* x, T* y, int64_t n) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  switch (op) {
    case UnaryOp::kNeg:
      return map(x, y, n, [](T v) {
        if constexpr (kFloat) {
          return -v;
        } else {
          return internal::wrap_neg(v);
        }
      });
    case UnaryOp::kAbs:
      return map(x, y, n, [](T v) {
        if constexpr (kFloat) {
          return std::abs(v);
        } else {
          return v < 0 ? internal::wrap_neg(v) : v;
        }
      });
    case UnaryOp::kSquare:
      return map(x, y, n, [](T v) { return internal::mul(v, v); });
    case UnaryOp::kRelu:
      return map(x, y, n, [](T v) { return internal::max_nan(v, T{0}); });
    case UnaryOp::kReluGrad:
      return map(x, y, n, [](T v) { return v > T{0} ? T{1} : T{0}; });
    case UnaryOp::kSign:
      return map(x, y, n, [](T v) {
        T s = static_cast<T>((T{0} < v) - (v < T{0}));
        if constexpr (kFloat) {
          return v != v ? v : s;
        } else {
          return s;
        }
      });
    default:
      break;
  }
  if constexpr (kFloat) {
    switch (op) {
      case UnaryOp::kExp:
        return map(x, y, n, [](T v) { return internal::exp_t(v); });
      case UnaryOp::kLog:
        return map(x, y, n, [](T v) { return std::log(v); });
      case UnaryOp::kSqrt:
        return map(x, y, n, [](T v) { return std::sqrt(v); });
      case UnaryOp::kRsqrt:
        return map(x, y, n, [](T v) { return T{1} / std::sqrt(v); });
      case UnaryOp::kSigmoid:
        return map(x, y, n, [](T v) { return T{1} / (T{1} + internal::exp_t(-v)); });
      case UnaryOp::kTanh:
        return map(x, y, n, [](T v) { return internal::tanh_t(v); });
      case UnaryOp::kGelu:
        return map(x, y, n, [](T v) {
          constexpr T kSqrt2OverPi = static_cast<T>(0.79788456080286535588);
          constexpr T kCubic = static_cast<T>(0.044715);
          return T{0.5} * v * (T{1} + internal::tanh_t(kSqrt2OverPi * (v + kCubic * v * v * v)));
        });
      default:
        break;
    }
  }
  DTENSOR_CHECK(false && "unary dtype was validated");
}

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  check_dtype(op, x);
  if (x.dtype() == DType::kBF16) {
    Tensor y = internal::bf16_to_f32(x);
    internal::unary_in_place(op, y);
    return internal::f32_to_bf16(y);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  internal::visit_numeric(x.dtype(), [&](auto t) {
    using T = decltype(t);
    apply<T>(op, x.data<T>(), y.data<T>(), x.num_elements());
  });
  // A recorder tracing somewhere learns what this call was (runtime/elementwise_notes.h).
  if (ElementwiseNotes::on()) {
    ElementwiseNotes::note({ElementwiseNote::Kind::kUnary,
                            static_cast<int>(op),
                            x.dtype(),
                            {x.raw_data(), nullptr},
                            y.raw_data()});
  }
  return y;
}

bool unary_into_supported(UnaryOp op, DType dtype) {
  return dtype != DType::kBF16 && internal::unary_supports(op, dtype);
}

void unary_into(UnaryOp op, DType dtype, const void* x, void* y, int64_t n) {
  internal::visit_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    apply<T>(op, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

namespace internal {

void unary_in_place(UnaryOp op, Tensor& t) {
  check_dtype(op, t);
  visit_numeric(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* data = t.data<T>();
    apply<T>(op, data, data, t.num_elements());
  });
}

}  // namespace internal
}  // namespace dtensor::kernels::cpu
