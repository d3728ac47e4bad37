// The elementwise family: unary ops, scale, cast, binary ops with NumPy broadcasting,
// comparisons and where. Every dim is its own letter, so any sharding passes through unchanged;
// broadcast size-1 dims stay unsharded. Linear ops (neg, scale, add, sub, and mul/div in the
// operand they are linear in) let partial sums through.
#include <algorithm>
#include <cmath>

#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

// ---- Shared forms ----------------------------------------------------------------------------

DTensor unary_forward(const char* name, UnaryOp op, const DTensor& x, bool linear = false) {
  OpSignature sig{name,
                  {},
                  {{iota_letters(x.rank()), linear}},
                  iota_letters(x.rank()),
                  linear ? Linearity::kMultilinear : Linearity::kNone};
  return expand(sig, {&x}, x.shape(), x.dtype(), static_cast<double>(x.num_elements()),
                [op](const Shards& s) { return kernels::unary(op, s[0]); });
}

Shape broadcast_shapes(const char* op, const Shape& x, const Shape& y, const DTensor& a,
                       const DTensor& b) {
  Shape out(std::max(x.size(), y.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t dx = i < out.size() - x.size() ? 1 : x[i - (out.size() - x.size())];
    int64_t dy = i < out.size() - y.size() ? 1 : y[i - (out.size() - y.size())];
    if (dx != dy && dx != 1 && dy != 1) {
      throw_error<ShapeError>(op, "shapes do not broadcast: {} and {}", a.short_string(),
                              b.short_string());
    }
    out[i] = dx == 1 ? dy : dx;
  }
  return out;
}

DTensor binary_forward(const char* name, BinaryOp op, const DTensor& a, const DTensor& b,
                       Linearity linearity = Linearity::kNone, bool a_linear = false,
                       bool b_linear = false) {
  check_same_mesh(name, {&a, &b});
  check_same_dtype(name, a, b);
  Shape out = broadcast_shapes(name, a.shape(), b.shape(), a, b);
  OpSignature sig{
      name,
      {},
      {broadcast_operand(a.shape(), out, a_linear), broadcast_operand(b.shape(), out, b_linear)},
      iota_letters(static_cast<int64_t>(out.size())),
      linearity};
  const bool comparison = op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual;
  return expand(sig, {&a, &b}, out, comparison ? DType::kBool : a.dtype(),
                static_cast<double>(num_elements(out)),
                [op](const Shards& s) { return kernels::binary(op, s[0], s[1]); });
}

// d/dx of gelu(x) = 0.5 x (1 + tanh(c (x + 0.044715 x^3))).
DTensor gelu_derivative(const DTensor& x) {
  const double c = 0.7978845608028654;
  DTensor x2 = square(x);
  DTensor u = scale(mul(x, add(fill_like(x, 1.0), scale(x2, 0.044715))), c);
  DTensor t = tanh(u);
  DTensor one = fill_like(x, 1.0);
  DTensor left = scale(add(one, t), 0.5);
  DTensor du = scale(add(one, scale(x2, 3 * 0.044715)), c);
  DTensor right = mul(scale(x, 0.5), mul(sub(one, square(t)), du));
  return add(left, right);
}

// Gradient of maximum/minimum: to `a` where it won (ties to a), else to `b`.
DTensor select_grad(const DTensor& g, const DTensor& a, const DTensor& b, bool max) {
  DTensor wins = max ? greater_equal(a, b) : less_equal(a, b);
  return mul(g, cast(wins, g.dtype()));
}

}  // namespace

// ---- Unary -----------------------------------------------------------------------------------

DTensor neg(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("neg", UnaryOp::kNeg, x, /*linear=*/true); },
      [&](const DTensor&) { return [](const DTensor& g) -> Grads { return {neg(g)}; }; });
}

DTensor abs(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("abs", UnaryOp::kAbs, x); },
      [&](const DTensor&) {
        return [x](const DTensor& g) -> Grads {
          return {mul(g, unary_forward("sign", UnaryOp::kSign, x))};
        };
      });
}

DTensor exp(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("exp", UnaryOp::kExp, x); },
      [&](const DTensor& y) { return [y](const DTensor& g) -> Grads { return {mul(g, y)}; }; });
}

DTensor log(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("log", UnaryOp::kLog, x); },
      [&](const DTensor&) { return [x](const DTensor& g) -> Grads { return {div(g, x)}; }; });
}

DTensor sqrt(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("sqrt", UnaryOp::kSqrt, x); },
      [&](const DTensor& y) {
        return [y](const DTensor& g) -> Grads { return {div(scale(g, 0.5), y)}; };
      });
}

DTensor rsqrt(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("rsqrt", UnaryOp::kRsqrt, x); },
      [&](const DTensor& y) {
        return [y](const DTensor& g) -> Grads { return {mul(g, scale(mul(y, mul(y, y)), -0.5))}; };
      });
}

DTensor square(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("square", UnaryOp::kSquare, x); },
      [&](const DTensor&) {
        return [x](const DTensor& g) -> Grads { return {mul(g, scale(x, 2.0))}; };
      });
}

DTensor relu(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("relu", UnaryOp::kRelu, x); },
      [&](const DTensor&) {
        return [x](const DTensor& g) -> Grads {
          return {mul(g, unary_forward("relu_grad", UnaryOp::kReluGrad, x))};
        };
      });
}

DTensor sigmoid(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("sigmoid", UnaryOp::kSigmoid, x); },
      [&](const DTensor& y) {
        return
            [y](const DTensor& g) -> Grads { return {mul(g, mul(y, sub(fill_like(y, 1.0), y)))}; };
      });
}

DTensor tanh(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("tanh", UnaryOp::kTanh, x); },
      [&](const DTensor& y) {
        return
            [y](const DTensor& g) -> Grads { return {mul(g, sub(fill_like(y, 1.0), square(y)))}; };
      });
}

DTensor gelu(const DTensor& x) {
  return recorded(
      {&x}, [&] { return unary_forward("gelu", UnaryOp::kGelu, x); },
      [&](const DTensor&) {
        return [x](const DTensor& g) -> Grads { return {mul(g, gelu_derivative(x))}; };
      });
}

// ---- scale -----------------------------------------------------------------------------------

namespace {

DTensor scale_forward(const DTensor& x, double alpha) {
  OpSignature sig{"scale",
                  {},
                  {{iota_letters(x.rank()), true}},
                  iota_letters(x.rank()),
                  Linearity::kMultilinear};
  // A non-finite factor times a partial sum's zero terms gives NaN where one device gives ±inf:
  // only a finite factor may pass the partial sum through.
  const DTensor in = std::isfinite(alpha) || !x.layout().is_partial()
                         ? x
                         : relayout(x, x.layout().without_partial());
  return expand(sig, {&in}, x.shape(), x.dtype(), static_cast<double>(x.num_elements()),
                [alpha](const Shards& s) { return kernels::scale(s[0], alpha); });
}

}  // namespace

DTensor scale(const DTensor& x, double alpha) {
  return recorded(
      {&x}, [&] { return scale_forward(x, alpha); },
      [&](const DTensor&) {
        return [alpha](const DTensor& g) -> Grads { return {scale(g, alpha)}; };
      });
}

// ---- cast ------------------------------------------------------------------------------------

namespace {

DTensor cast_forward(const DTensor& x, DType dtype) {
  if (dtype == x.dtype()) return x;  // the same value: recorded as nothing (ops/autograd.h)
  // A widening float cast is exact, so a partial sum may pass through it and be summed in the
  // wider dtype (the policy's f32 gradient reduction, ops/precision.h). The attribute keeps the
  // two kinds apart in the sharding cache.
  const bool widening = is_floating(x.dtype()) && is_floating(dtype) &&
                        dtype_size(dtype) > dtype_size(x.dtype());
  OpSignature sig{"cast",
                  widening ? "widen" : "",
                  {{iota_letters(x.rank()), false}},
                  iota_letters(x.rank()),
                  widening ? Linearity::kAdditive : Linearity::kNone};
  return expand(sig, {&x}, x.shape(), dtype, static_cast<double>(x.num_elements()),
                [dtype](const Shards& s) { return kernels::cast(s[0], dtype); });
}

}  // namespace

DTensor cast(const DTensor& x, DType dtype) {
  // An integer or bool source is data: nothing flows back to it.
  if (!is_floating(x.dtype())) return unrecorded([&] { return cast_forward(x, dtype); });
  return recorded(
      {&x}, [&] { return cast_forward(x, dtype); },
      [&](const DTensor&) {
        return [from = x.dtype()](const DTensor& g) -> Grads { return {cast(g, from)}; };
      });
}

// ---- Binary ----------------------------------------------------------------------------------

DTensor add(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return binary_forward("add", BinaryOp::kAdd, a, b, Linearity::kAdditive); },
      [&](const DTensor&) {
        return [sa = a.shape(), sb = b.shape()](const DTensor& g) -> Grads {
          return {sum_to(g, sa), sum_to(g, sb)};
        };
      });
}

DTensor sub(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return binary_forward("sub", BinaryOp::kSub, a, b, Linearity::kAdditive); },
      [&](const DTensor&) {
        return [sa = a.shape(), sb = b.shape()](const DTensor& g) -> Grads {
          return {sum_to(g, sa), sum_to(neg(g), sb)};
        };
      });
}

DTensor mul(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b},
      [&] {
        auto [x, y] = exact_product_operands(a, b, /*divide=*/false);
        return binary_forward("mul", BinaryOp::kMul, x, y, Linearity::kMultilinear, true, true);
      },
      [&](const DTensor&) {
        return [a, b](const DTensor& g) -> Grads {
          return {sum_to(mul(g, b), a.shape()), sum_to(mul(g, a), b.shape())};
        };
      });
}

DTensor div(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b},
      [&] {
        auto [x, y] = exact_product_operands(a, b, /*divide=*/true);
        return binary_forward("div", BinaryOp::kDiv, x, y, Linearity::kMultilinear, true, false);
      },
      [&](const DTensor& y) {
        return [a, b, y](const DTensor& g) -> Grads {
          DTensor ga = div(g, b);
          return {sum_to(ga, a.shape()), sum_to(neg(mul(ga, y)), b.shape())};
        };
      });
}

DTensor pow(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return binary_forward("pow", BinaryOp::kPow, a, b); },
      [&](const DTensor& y) {
        return [a, b, y](const DTensor& g) -> Grads {
          DTensor ga = mul(g, mul(b, pow(a, sub(b, fill_like(b, 1.0)))));
          DTensor gb = mul(g, mul(y, log(a)));
          return {sum_to(ga, a.shape()), sum_to(gb, b.shape())};
        };
      });
}

DTensor maximum(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return binary_forward("maximum", BinaryOp::kMaximum, a, b); },
      [&](const DTensor&) {
        return [a, b](const DTensor& g) -> Grads {
          DTensor ga = select_grad(g, a, b, /*max=*/true);
          return {sum_to(ga, a.shape()), sum_to(sub(g, ga), b.shape())};
        };
      });
}

DTensor minimum(const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return binary_forward("minimum", BinaryOp::kMinimum, a, b); },
      [&](const DTensor&) {
        return [a, b](const DTensor& g) -> Grads {
          DTensor ga = select_grad(g, a, b, /*max=*/false);
          return {sum_to(ga, a.shape()), sum_to(sub(g, ga), b.shape())};
        };
      });
}

// ---- Comparisons (bool outputs: nothing to differentiate, nothing recorded) ------------------

DTensor equal(const DTensor& a, const DTensor& b) {
  return binary_forward("equal", BinaryOp::kEqual, a, b);
}
DTensor not_equal(const DTensor& a, const DTensor& b) {
  return binary_forward("not_equal", BinaryOp::kNotEqual, a, b);
}
DTensor less(const DTensor& a, const DTensor& b) {
  return binary_forward("less", BinaryOp::kLess, a, b);
}
DTensor less_equal(const DTensor& a, const DTensor& b) {
  return binary_forward("less_equal", BinaryOp::kLessEqual, a, b);
}
DTensor greater(const DTensor& a, const DTensor& b) {
  return binary_forward("greater", BinaryOp::kGreater, a, b);
}
DTensor greater_equal(const DTensor& a, const DTensor& b) {
  return binary_forward("greater_equal", BinaryOp::kGreaterEqual, a, b);
}

// ---- where -----------------------------------------------------------------------------------

namespace {

DTensor where_forward(const DTensor& cond, const DTensor& a, const DTensor& b) {
  check_same_mesh("where", {&cond, &a, &b});
  check_same_dtype("where", a, b);
  if (cond.dtype() != DType::kBool) {
    throw_error<DTypeError>("where", "condition {} must be bool", cond.short_string());
  }
  Shape out = broadcast_shapes("where", a.shape(), b.shape(), a, b);
  // The condition against each value on its own, so that an error names the operand it
  // disagrees with; pairwise agreement means the three broadcast together.
  broadcast_shapes("where", cond.shape(), a.shape(), cond, a);
  broadcast_shapes("where", cond.shape(), b.shape(), cond, b);
  out = broadcast_shapes("where", cond.shape(), out, cond, a);
  OpSignature sig{
      "where",
      {},
      {broadcast_operand(cond.shape(), out, false), broadcast_operand(a.shape(), out, false),
       broadcast_operand(b.shape(), out, false)},
      iota_letters(static_cast<int64_t>(out.size()))};
  return expand(sig, {&cond, &a, &b}, out, a.dtype(), static_cast<double>(num_elements(out)),
                [](const Shards& s) { return kernels::where(s[0], s[1], s[2]); });
}

}  // namespace

DTensor where(const DTensor& cond, const DTensor& a, const DTensor& b) {
  return recorded(
      {&a, &b}, [&] { return where_forward(cond, a, b); },
      [&](const DTensor&) {
        return [cond, a, b](const DTensor& g) -> Grads {
          DTensor zero = fill_like(g, 0.0);
          return {sum_to(where(cond, g, zero), a.shape()), sum_to(where(cond, zero, g), b.shape())};
        };
      });
}

}  // namespace dtensor
