// Elementwise binary ops with NumPy broadcasting, where and broadcast_to.
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu/binary.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "runtime/elementwise_notes.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::BroadcastPlan;
using internal::describe;

enum class Family { kArithmetic, kPow, kCompare, kLogical };

Family family(BinaryOp op) {
  switch (op) {
    case BinaryOp::kPow:
      return Family::kPow;
    case BinaryOp::kEqual:
    case BinaryOp::kNotEqual:
    case BinaryOp::kLess:
    case BinaryOp::kLessEqual:
    case BinaryOp::kGreater:
    case BinaryOp::kGreaterEqual:
      return Family::kCompare;
    case BinaryOp::kLogicalAnd:
    case BinaryOp::kLogicalOr:
      return Family::kLogical;
    default:
      return Family::kArithmetic;
  }
}

bool supports(BinaryOp op, DType d) {
  switch (family(op)) {
    case Family::kArithmetic:
      return d != DType::kBool;
    case Family::kPow:
      return is_floating(d);
    case Family::kCompare:
      return d != DType::kBool || op == BinaryOp::kEqual || op == BinaryOp::kNotEqual;
    case Family::kLogical:
      return d == DType::kBool;
  }
  return false;
}

// The inner loop of one run: SA/SB are 1 when the operand advances along the run, 0 when it
// repeats one element, so each combination compiles to its own vectorizable loop.
template <int64_t SA, int64_t SB, typename T, typename R, typename Op>
void run_loop(const T* __restrict a, const T* __restrict b, R* __restrict out, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) out[i] = op(a[i * SA], b[i * SB]);
}

template <typename T, typename R, typename Op>
void broadcast_apply(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  BroadcastPlan<2> plan(out.shape(), {&a.shape(), &b.shape()});
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  const int64_t n = plan.inner();
  internal::with_inner_steps(plan, [&](auto sa, auto sb) {
    plan.for_each_run([&](int64_t o, const std::array<int64_t, 2>& in) {
      run_loop<decltype(sa)::value, decltype(sb)::value>(pa + in[0], pb + in[1], po + o, n, op);
    });
  });
}

template <typename T>
T divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // b == 0 was rejected up front; lowest / -1 overflows, so negate with wraparound instead.
    return b == T{-1} ? internal::wrap_neg(a) : static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

template <typename T>
void check_no_zero_divisor(const Tensor& a, const Tensor& b) {
  const T* pb = b.data<T>();
  bool zero = false;
  for (int64_t i = 0; i < b.num_elements(); ++i) zero |= pb[i] == T{0};
  if (zero && a.num_elements() > 0) {
    throw_error<InvalidArgumentError>("div", "integer division by zero: {} / {}", describe(a),
                                      describe(b));
  }
}

// Calls fn(element routine) for the ops whose result has the operands' type T (arithmetic, and
// pow on floats) and returns true; false for the others. One table for the broadcasting kernel and
// binary_into, so both run the same routine.
template <typename T, typename Fn>
bool with_arithmetic(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::kAdd:
      fn([](T x, T y) { return internal::add(x, y); });
      return true;
    case BinaryOp::kSub:
      fn([](T x, T y) {
        if constexpr (std::is_integral_v<T>) {
          return internal::wrap_sub(x, y);
        } else {
          return x - y;
        }
      });
      return true;
    case BinaryOp::kMul:
      fn([](T x, T y) { return internal::mul(x, y); });
      return true;
    case BinaryOp::kDiv:
      fn([](T x, T y) { return divide(x, y); });
      return true;
    case BinaryOp::kPow:
      if constexpr (std::is_floating_point_v<T>) {
        fn([](T x, T y) { return std::pow(x, y); });
        return true;
      }
      return false;
    case BinaryOp::kMaximum:
      fn([](T x, T y) { return internal::max_nan(x, y); });
      return true;
    case BinaryOp::kMinimum:
      fn([](T x, T y) { return internal::min_nan(x, y); });
      return true;
    default:
      return false;
  }
}

template <typename T>
void compute(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if constexpr (std::is_integral_v<T>) {
    if (op == BinaryOp::kDiv) check_no_zero_divisor<T>(a, b);
  }
  if (with_arithmetic<T>(op, [&](auto f) { broadcast_apply<T, T>(a, b, out, f); })) return;
  switch (op) {
    case BinaryOp::kEqual:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x == y; });
    case BinaryOp::kNotEqual:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x != y; });
    case BinaryOp::kLess:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x < y; });
    case BinaryOp::kLessEqual:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x <= y; });
    case BinaryOp::kGreater:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x > y; });
    case BinaryOp::kGreaterEqual:
      return broadcast_apply<T, bool>(a, b, out, [](T x, T y) { return x >= y; });
    default:
      break;
  }
  DTENSOR_CHECK(false && "binary dtype was validated");
}

void compute_bool(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  switch (op) {
    case BinaryOp::kEqual:
      return broadcast_apply<bool, bool>(a, b, out, [](bool x, bool y) { return x == y; });
    case BinaryOp::kNotEqual:
      return broadcast_apply<bool, bool>(a, b, out, [](bool x, bool y) { return x != y; });
    case BinaryOp::kLogicalAnd:
      return broadcast_apply<bool, bool>(a, b, out, [](bool x, bool y) { return x && y; });
    case BinaryOp::kLogicalOr:
      return broadcast_apply<bool, bool>(a, b, out, [](bool x, bool y) { return x || y; });
    default:
      break;
  }
  DTENSOR_CHECK(false && "binary dtype was validated");
}

Shape broadcast_or_throw(const char* op, const Tensor& a, const Tensor& b) {
  Shape out;
  if (!internal::try_broadcast_shapes(a.shape(), b.shape(), &out)) {
    throw_error<ShapeError>(op, "incompatible shapes for broadcasting: {} vs {}", describe(a),
                            describe(b));
  }
  return out;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const std::string name(binary_op_name(op));
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(name, "dtypes differ: {} vs {}", describe(a), describe(b));
  }
  if (!supports(op, a.dtype())) {
    throw_error<DTypeError>(name, "unsupported dtype {}: {} vs {}", dtype_name(a.dtype()),
                            describe(a), describe(b));
  }
  Shape shape = broadcast_or_throw(name.c_str(), a, b);
  const Family fam = family(op);
  if (a.dtype() == DType::kBF16) {
    Tensor fa = internal::bf16_to_f32(a);
    Tensor fb = internal::bf16_to_f32(b);
    Tensor out = binary(op, fa, fb);  // comparisons of the widened values are exact
    return fam == Family::kCompare ? out : internal::f32_to_bf16(out);
  }
  Tensor out = Tensor::empty(shape, fam == Family::kCompare ? DType::kBool : a.dtype(), a.device());
  if (a.dtype() == DType::kBool) {
    compute_bool(op, a, b, out);
  } else {
    internal::visit_numeric(a.dtype(), [&](auto t) { compute<decltype(t)>(op, a, b, out); });
  }
  // A recorder tracing somewhere learns what this call was (runtime/elementwise_notes.h).
  if (ElementwiseNotes::on()) {
    ElementwiseNotes::note({ElementwiseNote::Kind::kBinary,
                            static_cast<int>(op),
                            a.dtype(),
                            {a.raw_data(), b.raw_data()},
                            out.raw_data()});
  }
  return out;
}

bool binary_into_supported(BinaryOp op, DType dtype) {
  if (dtype == DType::kBF16 || dtype == DType::kBool) return false;
  if (is_integer(dtype)) return op != BinaryOp::kDiv && family(op) == Family::kArithmetic;
  return family(op) == Family::kArithmetic || family(op) == Family::kPow;
}

void binary_into(BinaryOp op, DType dtype, const void* a, bool a_repeats, const void* b,
                 bool b_repeats, void* out, int64_t n) {
  DTENSOR_CHECK(!(a_repeats && b_repeats));
  internal::visit_numeric(dtype, [&](auto t) {
    using T = decltype(t);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    const bool known = with_arithmetic<T>(op, [&](auto f) {
      if (a_repeats) {
        run_loop<0, 1>(pa, pb, po, n, f);
      } else if (b_repeats) {
        run_loop<1, 0>(pa, pb, po, n, f);
      } else {
        run_loop<1, 1>(pa, pb, po, n, f);
      }
    });
    DTENSOR_CHECK(known && "binary_into op was checked by binary_into_supported");
  });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.dtype() != DType::kBool) {
    throw_error<DTypeError>("where", "condition must be bool, got {}", describe(cond));
  }
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>("where", "dtypes differ: {} vs {}", describe(a), describe(b));
  }
  Shape ab, shape;
  if (!internal::try_broadcast_shapes(a.shape(), b.shape(), &ab) ||
      !internal::try_broadcast_shapes(cond.shape(), ab, &shape)) {
    throw_error<ShapeError>("where", "incompatible shapes for broadcasting: {} ? {} : {}",
                            describe(cond), describe(a), describe(b));
  }
  Tensor out = Tensor::empty(shape, a.dtype(), cond.device());
  BroadcastPlan<3> plan(shape, {&cond.shape(), &a.shape(), &b.shape()});
  const int64_t n = plan.inner();
  const bool* pc = cond.data<bool>();
  internal::visit_element_size(dtype_size(a.dtype()), [&](auto tag) {
    using U = decltype(tag);
    const U* pa = static_cast<const U*>(a.raw_data());
    const U* pb = static_cast<const U*>(b.raw_data());
    U* po = static_cast<U*>(out.raw_data());
    internal::with_inner_steps(plan, [&](auto sc, auto sa, auto sb) {
      constexpr int64_t SC = decltype(sc)::value, SA = decltype(sa)::value,
                        SB = decltype(sb)::value;
      plan.for_each_run([&](int64_t o, const std::array<int64_t, 3>& in) {
        const bool* __restrict c = pc + in[0];
        const U* __restrict x = pa + in[1];
        const U* __restrict y = pb + in[2];
        U* __restrict z = po + o;
        for (int64_t i = 0; i < n; ++i) z[i] = c[i * SC] ? x[i * SA] : y[i * SB];
      });
    });
  });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  validate_shape(shape, "broadcast_to");
  if (!internal::broadcasts_to(x.shape(), shape)) {
    throw_error<ShapeError>("broadcast_to", "cannot broadcast {} to {}", describe(x),
                            shape_to_string(shape));
  }
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  BroadcastPlan<1> plan(shape, {&x.shape()});
  const int64_t n = plan.inner();
  const size_t esize = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  if (plan.inner_step(0) == 1) {
    plan.for_each_run([&](int64_t o, const std::array<int64_t, 1>& in) {
      std::memcpy(dst + o * esize, src + in[0] * esize, static_cast<size_t>(n) * esize);
    });
    return out;
  }
  internal::visit_element_size(esize, [&](auto tag) {
    using U = decltype(tag);
    plan.for_each_run([&](int64_t o, const std::array<int64_t, 1>& in) {
      const U v = static_cast<const U*>(x.raw_data())[in[0]];
      U* __restrict z = static_cast<U*>(out.raw_data()) + o;
      for (int64_t i = 0; i < n; ++i) z[i] = v;
    });
  });
  return out;
}

}  // namespace dtensor::kernels::cpu
