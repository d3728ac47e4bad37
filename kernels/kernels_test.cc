// Kernels against naive double-precision reference loops, gradients against finite differences,
// and the exact message of every error.
#include "kernels/kernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

using namespace dtensor;
using namespace dtensor::kernels;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<DType> kFloatTypes = {DType::kF32, DType::kF64, DType::kBF16};
const std::vector<DType> kNumericTypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kI32,
                                          DType::kI64};

// ---- Tensor <-> doubles ------------------------------------------------------------------------

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        v[i] = static_cast<double>(static_cast<float>(p[i]));
      } else {
        v[i] = static_cast<double>(p[i]);
      }
    }
  });
  return v;
}

// Exact for the values the tests use (small integers, or values rounded to the dtype first).
Tensor make(const Shape& shape, DType dtype, const std::vector<double>& v) {
  Tensor t = Tensor::empty(shape, dtype);
  REQUIRE(static_cast<int64_t>(v.size()) == t.num_elements());
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        p[i] = BFloat16(static_cast<float>(v[i]));
      } else {
        p[i] = static_cast<T>(v[i]);
      }
    }
  });
  return t;
}

// Uniform floats in [lo, hi] rounded to the dtype, integers in [lo, hi], or random bools.
Tensor random_tensor(const Shape& shape, DType dtype, std::mt19937& rng, double lo = -2,
                     double hi = 2) {
  std::vector<double> v(static_cast<size_t>(num_elements(shape)));
  for (double& x : v) {
    if (dtype == DType::kBool) {
      x = std::uniform_int_distribution<int>(0, 1)(rng);
    } else if (is_integer(dtype)) {
      x = std::uniform_int_distribution<int64_t>(static_cast<int64_t>(lo),
                                                 static_cast<int64_t>(hi))(rng);
    } else {
      x = std::uniform_real_distribution<double>(lo, hi)(rng);
    }
  }
  return make(shape, dtype, v);
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 2e-5;
    case DType::kF64:
      return 1e-11;
    case DType::kBF16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// got == want elementwise within `tol` relative to max(1, |want|); NaN matches NaN.
void check_values(const Tensor& got, const Shape& shape, DType dtype,
                  const std::vector<double>& want, double tol) {
  REQUIRE(shape_to_string(got.shape()) == shape_to_string(shape));
  REQUIRE(dtype_name(got.dtype()) == dtype_name(dtype));
  const std::vector<double> g = values(got);
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double w = want[i];
    bool ok;
    if (std::isnan(w)) {
      ok = std::isnan(g[i]);
    } else if (std::isinf(w)) {
      ok = g[i] == w;
    } else {
      ok = std::abs(g[i] - w) <= tol * std::max(1.0, std::abs(w));
    }
    if (!ok) {
      INFO("element " << i << ": got " << g[i] << ", want " << w);
      CHECK(ok);
      return;
    }
  }
}

// ---- Index helpers for the references ----------------------------------------------------------

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// Flat position in `in` (broadcast to the output) of the output element at `out_index`.
int64_t broadcast_source(const std::vector<int64_t>& out_index, const Shape& in) {
  int64_t flat = 0;
  const size_t offset = out_index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    flat = flat * in[d] + (in[d] == 1 ? 0 : out_index[offset + d]);
  }
  return flat;
}

Shape ref_broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t d = 0; d < out.size(); ++d) {
    int64_t da = d + a.size() >= out.size() ? a[d + a.size() - out.size()] : 1;
    int64_t db = d + b.size() >= out.size() ? b[d + b.size() - out.size()] : 1;
    out[d] = da == 1 ? db : da;
  }
  return out;
}

// Rounds a reference value the way the kernel's output dtype stores it.
double round_to(double v, DType dtype) {
  if (dtype == DType::kF32) return static_cast<float>(v);
  if (dtype == DType::kBF16) return static_cast<float>(BFloat16(static_cast<float>(v)));
  return v;
}

// ---- Shape lists -------------------------------------------------------------------------------

const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{}, {}},
    {{5}, {}},
    {{}, {4}},
    {{7}, {7}},
    {{2, 3}, {3}},
    {{2, 3}, {2, 1}},
    {{2, 1, 4}, {3, 1}},
    {{3, 1, 5}, {1, 4, 1}},
    {{2, 3, 4, 5}, {3, 1, 5}},
    {{4, 5, 6}, {4, 5, 6}},
    {{1}, {6}},
    {{0, 3}, {3}},
    {{2, 0}, {1}},
    {{1, 0}, {4, 1}},
    {{33, 17}, {17}},
    {{17, 1}, {17, 33}},
    {{1, 1, 3}, {2, 1, 1}},
};

const std::vector<Shape> kShapes = {{},        {1},       {7},       {0},      {3, 4},      {0, 5},
                                    {4, 0, 2}, {2, 3, 5}, {1, 6, 1}, {33, 17}, {2, 3, 4, 5}};

// ---- Finite differences ------------------------------------------------------------------------

// d f / d x[i] for every i by central differences on an f64 tensor.
std::vector<double> numeric_gradient(const Tensor& x, const std::function<double(const Tensor&)>& f,
                                     double h = 1e-6) {
  std::vector<double> grad(static_cast<size_t>(x.num_elements()));
  for (size_t i = 0; i < grad.size(); ++i) {
    Tensor plus = x.clone(), minus = x.clone();
    plus.data<double>()[i] += h;
    minus.data<double>()[i] -= h;
    grad[i] = (f(plus) - f(minus)) / (2 * h);
  }
  return grad;
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> va = values(a), vb = values(b);
  return std::inner_product(va.begin(), va.end(), vb.begin(), 0.0);
}

}  // namespace

// ================================================================================================
// Elementwise
// ================================================================================================

TEST_CASE("broadcast_shapes follows NumPy rules") {
  CHECK(broadcast_shapes({2, 3}, {3}, "add") == Shape{2, 3});
  CHECK(broadcast_shapes({}, {4}, "add") == Shape{4});
  CHECK(broadcast_shapes({3, 1, 5}, {1, 4, 1}, "add") == Shape{3, 4, 5});
  CHECK(broadcast_shapes({1, 0}, {4, 1}, "add") == Shape{4, 0});
  CHECK_THROWS_MATCHES(broadcast_shapes({2, 3}, {4}, "mul"), ShapeError,
                       Catch::Message("[mul] incompatible shapes for broadcasting: [2,3] vs [4]"));
}

double ref_binary(BinaryOp op, double a, double b, DType dtype) {
  const bool integer = is_integer(dtype);
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return integer ? std::trunc(a / b) : a / b;
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kMaximum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case BinaryOp::kMinimum:
      return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case BinaryOp::kEqual:
      return a == b;
    case BinaryOp::kNotEqual:
      return a != b;
    case BinaryOp::kLess:
      return a < b;
    case BinaryOp::kLessEqual:
      return a <= b;
    case BinaryOp::kGreater:
      return a > b;
    case BinaryOp::kGreaterEqual:
      return a >= b;
    case BinaryOp::kLogicalAnd:
      return a != 0 && b != 0;
    case BinaryOp::kLogicalOr:
      return a != 0 || b != 0;
  }
  return kNaN;
}

void check_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = ref_broadcast(a.shape(), b.shape());
  const bool compare = op >= BinaryOp::kEqual;
  const DType out_dtype = compare ? DType::kBool : a.dtype();
  const std::vector<double> va = values(a), vb = values(b);
  std::vector<double> want(static_cast<size_t>(num_elements(shape)));
  for (size_t i = 0; i < want.size(); ++i) {
    const auto index = unravel(static_cast<int64_t>(i), shape);
    const double x = va[static_cast<size_t>(broadcast_source(index, a.shape()))];
    const double y = vb[static_cast<size_t>(broadcast_source(index, b.shape()))];
    want[i] = ref_binary(op, x, y, a.dtype());
  }
  INFO(binary_op_name(op) << " " << a.to_string() << " " << b.to_string());
  check_values(binary(op, a, b), shape, out_dtype, want, compare ? 0 : tolerance(a.dtype()));
}

TEST_CASE("binary arithmetic matches the reference over broadcast shapes and dtypes") {
  std::mt19937 rng(1);
  for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                      BinaryOp::kMaximum, BinaryOp::kMinimum}) {
    for (DType dtype : kNumericTypes) {
      for (const auto& [sa, sb] : kBroadcastPairs) {
        const double lo = is_integer(dtype) ? -20 : -3;
        Tensor a = random_tensor(sa, dtype, rng, lo, -lo);
        Tensor b = random_tensor(sb, dtype, rng, lo, -lo);
        if (op == BinaryOp::kDiv) {  // keep divisors away from zero
          for (Tensor* t : {&a, &b}) {
            std::vector<double> v = values(*t);
            for (double& x : v) x = x >= 0 ? x + 1 : x - 1;
            *t = make(t->shape(), dtype, v);
          }
        }
        check_binary(op, a, b);
        check_binary(op, b, a);
      }
    }
  }
}

TEST_CASE("pow computes in the float dtype") {
  std::mt19937 rng(2);
  for (DType dtype : kFloatTypes) {
    for (const auto& [sa, sb] : kBroadcastPairs) {
      check_binary(BinaryOp::kPow, random_tensor(sa, dtype, rng, 0.1, 3),
                   random_tensor(sb, dtype, rng, -2, 2));
    }
  }
}

TEST_CASE("comparisons return bool for every dtype") {
  std::mt19937 rng(3);
  for (BinaryOp op : {BinaryOp::kEqual, BinaryOp::kNotEqual, BinaryOp::kLess, BinaryOp::kLessEqual,
                      BinaryOp::kGreater, BinaryOp::kGreaterEqual}) {
    for (DType dtype : kNumericTypes) {
      for (const auto& [sa, sb] : kBroadcastPairs) {
        // Few distinct values, so that equality happens.
        check_binary(op, make(sa, dtype, values(random_tensor(sa, DType::kI32, rng, -2, 2))),
                     make(sb, dtype, values(random_tensor(sb, DType::kI32, rng, -2, 2))));
      }
    }
  }
  Tensor t = make({3}, DType::kBool, {1, 0, 1});
  Tensor u = make({3}, DType::kBool, {1, 1, 0});
  check_values(binary(BinaryOp::kEqual, t, u), {3}, DType::kBool, {1, 0, 0}, 0);
  check_values(binary(BinaryOp::kNotEqual, t, u), {3}, DType::kBool, {0, 1, 1}, 0);
}

TEST_CASE("logical ops on bool broadcast") {
  std::mt19937 rng(4);
  for (BinaryOp op : {BinaryOp::kLogicalAnd, BinaryOp::kLogicalOr}) {
    for (const auto& [sa, sb] : kBroadcastPairs) {
      check_binary(op, random_tensor(sa, DType::kBool, rng), random_tensor(sb, DType::kBool, rng));
    }
  }
}

TEST_CASE("maximum and minimum propagate NaN") {
  Tensor a = make({4}, DType::kF32, {1, kNaN, 3, kNaN});
  Tensor b = make({4}, DType::kF32, {kNaN, 2, 1, kNaN});
  check_values(binary(BinaryOp::kMaximum, a, b), {4}, DType::kF32, {kNaN, kNaN, 3, kNaN}, 0);
  check_values(binary(BinaryOp::kMinimum, a, b), {4}, DType::kF32, {kNaN, kNaN, 1, kNaN}, 0);
}

TEST_CASE("integer arithmetic wraps and division truncates") {
  const double lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  Tensor a = make({4}, DType::kI32, {hi, lo, -7, lo});
  Tensor b = make({4}, DType::kI32, {1, -1, 2, -1});
  check_values(binary(BinaryOp::kAdd, a, b), {4}, DType::kI32, {lo, hi, -5, hi}, 0);
  check_values(binary(BinaryOp::kDiv, a, b), {4}, DType::kI32, {hi, lo, -3, lo}, 0);
  check_values(binary(BinaryOp::kMul, a, b), {4}, DType::kI32, {hi, lo, -14, lo}, 0);
  check_values(unary(UnaryOp::kNeg, a), {4}, DType::kI32, {-hi, lo, 7, lo}, 0);
  check_values(unary(UnaryOp::kAbs, a), {4}, DType::kI32, {hi, lo, 7, lo}, 0);
}

TEST_CASE("binary errors name the op, dtypes and shapes") {
  Tensor f = Tensor::zeros({2, 3}, DType::kF32);
  Tensor d = Tensor::zeros({3}, DType::kF64);
  Tensor g = Tensor::zeros({4}, DType::kF32);
  Tensor i = make({2}, DType::kI32, {1, 0});
  Tensor bl = Tensor::zeros({2}, DType::kBool);
  CHECK_THROWS_MATCHES(binary(BinaryOp::kAdd, f, d), DTypeError,
                       Catch::Message("[add] dtypes differ: f32[2,3] vs f64[3]"));
  CHECK_THROWS_MATCHES(
      binary(BinaryOp::kMul, f, g), ShapeError,
      Catch::Message("[mul] incompatible shapes for broadcasting: f32[2,3] vs f32[4]"));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kDiv, i, i), InvalidArgumentError,
                       Catch::Message("[div] integer division by zero: i32[2] / i32[2]"));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kPow, i, i), DTypeError,
                       Catch::Message("[pow] unsupported dtype i32: i32[2] vs i32[2]"));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kSub, bl, bl), DTypeError,
                       Catch::Message("[sub] unsupported dtype bool: bool[2] vs bool[2]"));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kLess, bl, bl), DTypeError,
                       Catch::Message("[less] unsupported dtype bool: bool[2] vs bool[2]"));
  CHECK_THROWS_MATCHES(binary(BinaryOp::kLogicalAnd, g, g), DTypeError,
                       Catch::Message("[logical_and] unsupported dtype f32: f32[4] vs f32[4]"));
}

double ref_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return std::abs(x);
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kSqrt:
      return std::sqrt(x);
    case UnaryOp::kRsqrt:
      return 1 / std::sqrt(x);
    case UnaryOp::kSquare:
      return x * x;
    case UnaryOp::kRelu:
      return x > 0 ? x : 0;
    case UnaryOp::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case UnaryOp::kTanh:
      return std::tanh(x);
    case UnaryOp::kGelu:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::kReluGrad:
      return x > 0 ? 1 : 0;
    case UnaryOp::kSign:
      return (x > 0) - (x < 0);
  }
  return kNaN;
}

TEST_CASE("unary ops match the reference") {
  std::mt19937 rng(5);
  const std::vector<UnaryOp> all = {
      UnaryOp::kNeg,   UnaryOp::kAbs,      UnaryOp::kExp,  UnaryOp::kLog,     UnaryOp::kSqrt,
      UnaryOp::kRsqrt, UnaryOp::kSquare,   UnaryOp::kRelu, UnaryOp::kSigmoid, UnaryOp::kTanh,
      UnaryOp::kGelu,  UnaryOp::kReluGrad, UnaryOp::kSign};
  for (UnaryOp op : all) {
    const bool positive = op == UnaryOp::kLog || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt;
    for (DType dtype : kNumericTypes) {
      const bool integer_op = op == UnaryOp::kNeg || op == UnaryOp::kAbs ||
                              op == UnaryOp::kSquare || op == UnaryOp::kRelu ||
                              op == UnaryOp::kReluGrad || op == UnaryOp::kSign;
      if (is_integer(dtype) && !integer_op) continue;
      for (const Shape& shape : kShapes) {
        Tensor x = is_integer(dtype) ? random_tensor(shape, dtype, rng, -30, 30)
                                     : random_tensor(shape, dtype, rng, positive ? 0.05 : -4, 4);
        std::vector<double> want = values(x);
        for (double& v : want) v = ref_unary(op, v);
        INFO(unary_op_name(op) << " " << x.to_string());
        check_values(unary(op, x), shape, dtype, want, tolerance(dtype));
      }
    }
  }
  check_values(unary(UnaryOp::kSign, make({3}, DType::kF64, {kNaN, -0.0, 2})), {3}, DType::kF64,
               {kNaN, 0, 1}, 0);
  check_values(unary(UnaryOp::kRelu, make({2}, DType::kF32, {kNaN, -1})), {2}, DType::kF32,
               {kNaN, 0}, 0);
}

// Error of got against the exact value in units of the f32 spacing at the exact value (spacing of
// the smallest subnormal below 2^-126).
double ulp_error(float got, double exact) {
  if (std::isnan(exact)) return std::isnan(got) ? 0 : kInf;
  const float rounded = static_cast<float>(exact);  // inf when exact is beyond the f32 range
  if (std::isinf(rounded)) return got == rounded ? 0 : kInf;
  int exponent;
  std::frexp(exact, &exponent);
  const double ulp = std::ldexp(1.0, std::max(exponent, -125) - 24);
  return std::abs(static_cast<double>(got) - exact) / ulp;
}

TEST_CASE("f32 exp and tanh stay within a few ulp over their whole range") {
  std::vector<double> xs;
  for (double x = -110; x <= 90; x += 0.0137) xs.push_back(static_cast<float>(x));
  for (double x : {0.0, -0.0, 1e-30, -1e-30, 88.7228, 88.7229, -87.3, -103.9, -104.0, 1e-3, 0.6249,
                   0.6251, -0.625, kInf, -kInf, kNaN}) {
    xs.push_back(static_cast<float>(x));
  }
  const Tensor x = make({static_cast<int64_t>(xs.size())}, DType::kF32, xs);
  const Tensor exp_x = unary(UnaryOp::kExp, x), tanh_x = unary(UnaryOp::kTanh, x);
  const float* e = exp_x.data<float>();
  const float* t = tanh_x.data<float>();
  double worst_exp = 0, worst_tanh = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    worst_exp = std::max(worst_exp, ulp_error(e[i], std::exp(xs[i])));
    worst_tanh = std::max(worst_tanh, ulp_error(t[i], std::tanh(xs[i])));
    if (ulp_error(e[i], std::exp(xs[i])) > 2.0 || ulp_error(t[i], std::tanh(xs[i])) > 3.0) {
      FAIL_CHECK("x = " << xs[i] << ": exp " << e[i] << " tanh " << t[i]);
    }
  }
  CHECK(worst_exp <= 2.0);
  CHECK(worst_tanh <= 3.0);
  // Saturation and specials are exact.
  check_values(unary(UnaryOp::kExp, make({4}, DType::kF32, {kInf, -kInf, 100, -200})), {4},
               DType::kF32, {kInf, 0, kInf, 0}, 0);
  check_values(unary(UnaryOp::kTanh, make({4}, DType::kF32, {kInf, -kInf, 30, -0.0})), {4},
               DType::kF32, {1, -1, 1, 0}, 0);
  check_values(unary(UnaryOp::kSigmoid, make({3}, DType::kF32, {-200, 200, 0})), {3}, DType::kF32,
               {0, 1, 0.5}, 0);
}

TEST_CASE("unary rejects unsupported dtypes") {
  CHECK_THROWS_MATCHES(unary(UnaryOp::kExp, Tensor::zeros({2}, DType::kI64)), DTypeError,
                       Catch::Message("[exp] unsupported dtype i64: i64[2]"));
  CHECK_THROWS_MATCHES(unary(UnaryOp::kNeg, Tensor::zeros({2, 1}, DType::kBool)), DTypeError,
                       Catch::Message("[neg] unsupported dtype bool: bool[2,1]"));
}

TEST_CASE("scale multiplies in the dtype") {
  std::mt19937 rng(6);
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      Tensor x = random_tensor(shape, dtype, rng);
      std::vector<double> want = values(x);
      for (double& v : want) v *= 0.375;
      check_values(scale(x, 0.375), shape, dtype, want, tolerance(dtype));
    }
  }
  CHECK_THROWS_MATCHES(scale(Tensor::zeros({2}, DType::kI32), 2.0), DTypeError,
                       Catch::Message("[scale] needs a floating dtype, got i32[2]"));
}

TEST_CASE("where broadcasts condition and both branches") {
  std::mt19937 rng(7);
  const std::vector<std::array<Shape, 3>> cases = {
      {Shape{}, Shape{}, Shape{}},      {Shape{4}, Shape{}, Shape{4}},
      {Shape{2, 1}, Shape{3}, Shape{}}, {Shape{3}, Shape{2, 3}, Shape{2, 1}},
      {Shape{0}, Shape{1}, Shape{}},    {Shape{5, 1, 3}, Shape{1, 4, 1}, Shape{4, 3}}};
  for (DType dtype :
       {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64, DType::kBool}) {
    for (const auto& [sc, sa, sb] : cases) {
      Tensor c = random_tensor(sc, DType::kBool, rng);
      Tensor a = random_tensor(sa, dtype, rng, -9, 9);
      Tensor b = random_tensor(sb, dtype, rng, -9, 9);
      const Shape shape = ref_broadcast(sc, ref_broadcast(sa, sb));
      std::vector<double> want(static_cast<size_t>(num_elements(shape)));
      const auto vc = values(c), va = values(a), vb = values(b);
      for (size_t i = 0; i < want.size(); ++i) {
        auto index = unravel(static_cast<int64_t>(i), shape);
        want[i] = vc[static_cast<size_t>(broadcast_source(index, sc))]
                      ? va[static_cast<size_t>(broadcast_source(index, sa))]
                      : vb[static_cast<size_t>(broadcast_source(index, sb))];
      }
      check_values(where(c, a, b), shape, dtype, want, 0);
    }
  }
  Tensor f = Tensor::zeros({2}, DType::kF32);
  CHECK_THROWS_MATCHES(where(f, f, f), DTypeError,
                       Catch::Message("[where] condition must be bool, got f32[2]"));
  Tensor c = Tensor::zeros({3}, DType::kBool);
  CHECK_THROWS_MATCHES(where(c, f, Tensor::zeros({2}, DType::kI32)), DTypeError,
                       Catch::Message("[where] dtypes differ: f32[2] vs i32[2]"));
  CHECK_THROWS_MATCHES(
      where(c, f, f), ShapeError,
      Catch::Message("[where] incompatible shapes for broadcasting: bool[3] ? f32[2] : f32[2]"));
}

TEST_CASE("cast converts between every pair of dtypes") {
  const std::vector<DType> all = {DType::kF32, DType::kF64, DType::kBF16,
                                  DType::kI32, DType::kI64, DType::kBool};
  const std::vector<double> v = {0, 1, -2, 3, 100, -7};
  for (DType from : all) {
    for (DType to : all) {
      std::vector<double> src = v;
      if (from == DType::kBool) {
        for (double& x : src) x = x != 0;
      }
      std::vector<double> want = src;
      if (to == DType::kBool) {
        for (double& x : want) x = x != 0;
      }
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      check_values(cast(make({2, 3}, from, src), to), {2, 3}, to, want, 0);
    }
  }
}

TEST_CASE("cast truncates, saturates and rounds") {
  Tensor f = make({7}, DType::kF64, {2.7, -2.7, 1e10, -1e10, kNaN, kInf, -kInf});
  const double i32max = std::numeric_limits<int32_t>::max();
  const double i32min = std::numeric_limits<int32_t>::min();
  check_values(cast(f, DType::kI32), {7}, DType::kI32, {2, -2, i32max, i32min, 0, i32max, i32min},
               0);
  Tensor big = make({2}, DType::kF32, {1e30f, -1e30f});
  CHECK(cast(big, DType::kI64).data<int64_t>()[0] == std::numeric_limits<int64_t>::max());
  CHECK(cast(big, DType::kI64).data<int64_t>()[1] == std::numeric_limits<int64_t>::min());
  check_values(cast(make({3}, DType::kF32, {kNaN, 0, -0.5}), DType::kBool), {3}, DType::kBool,
               {1, 0, 1}, 0);
  // 1 + 2^-8 + 2^-30 is just above a bf16 tie: rounding through f32 first would give 1.
  Tensor d =
      make({2}, DType::kF64, {1 + std::ldexp(1, -8) + std::ldexp(1, -30), 1 + std::ldexp(1, -8)});
  check_values(cast(d, DType::kBF16), {2}, DType::kBF16, {1 + std::ldexp(1, -7), 1}, 0);
  // f32 -> bf16 rounds to nearest even and keeps NaN.
  check_values(cast(make({3}, DType::kF32, {1 + 3.0 / 256, kNaN, -kInf}), DType::kBF16), {3},
               DType::kBF16, {1 + 4.0 / 256, kNaN, -kInf}, 0);
}

TEST_CASE("broadcast_to and sum_to are adjoint") {
  std::mt19937 rng(8);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {3, 2}}, {{3}, {2, 3}},    {{2, 1}, {2, 5}},   {{1, 4, 1}, {3, 4, 5}},
      {{1}, {0}},   {{2, 3}, {2, 3}}, {{1, 1}, {4, 1, 1}}};
  for (DType dtype : kNumericTypes) {
    for (const auto& [small, big] : cases) {
      Tensor x = random_tensor(small, dtype, rng, -5, 5);
      Tensor y = random_tensor(big, dtype, rng, -5, 5);
      Tensor bx = broadcast_to(x, big);
      std::vector<double> want(static_cast<size_t>(num_elements(big)));
      const auto vx = values(x), vy = values(y);
      std::vector<double> sum_want(vx.size(), 0.0);
      for (size_t i = 0; i < want.size(); ++i) {
        const int64_t src = broadcast_source(unravel(static_cast<int64_t>(i), big), small);
        want[i] = vx[static_cast<size_t>(src)];
        sum_want[static_cast<size_t>(src)] += vy[i];
      }
      check_values(bx, big, dtype, want, 0);
      check_values(sum_to(y, small), small, dtype, sum_want, tolerance(dtype) * 4);
    }
  }
  check_values(broadcast_to(make({2}, DType::kBool, {1, 0}), {2, 2}), {2, 2}, DType::kBool,
               {1, 0, 1, 0}, 0);
  CHECK_THROWS_MATCHES(broadcast_to(Tensor::zeros({3}, DType::kF32), {2, 4}), ShapeError,
                       Catch::Message("[broadcast_to] cannot broadcast f32[3] to [2,4]"));
  CHECK_THROWS_MATCHES(sum_to(Tensor::zeros({2, 3}, DType::kF32), {2}), ShapeError,
                       Catch::Message("[sum_to] cannot sum f32[2,3] to [2]"));
  CHECK_THROWS_MATCHES(sum_to(Tensor::zeros({2}, DType::kBool), {1}), DTypeError,
                       Catch::Message("[sum_to] unsupported dtype bool: bool[2]"));
  CHECK_THROWS_MATCHES(broadcast_to(Tensor::zeros({1}, DType::kF32), {-1}), ShapeError,
                       Catch::Message("[broadcast_to] negative dim in shape [-1]"));
}

// ================================================================================================
// Matmul
// ================================================================================================

// Reference [..., m, n] for a [..., m, k] (or [..., k, m] transposed) and b likewise.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, Shape* out) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const int64_t m = ta ? sa.back() : sa[sa.size() - 2];
  const int64_t k = ta ? sa[sa.size() - 2] : sa.back();
  const int64_t n = tb ? sb[sb.size() - 2] : sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const Shape batch = ref_broadcast(ba, bb);
  *out = batch;
  out->push_back(m);
  out->push_back(n);
  const auto va = values(a), vb = values(b);
  std::vector<double> result(static_cast<size_t>(num_elements(*out)), 0.0);
  for (int64_t bi = 0; bi < num_elements(batch); ++bi) {
    const auto index = unravel(bi, batch);
    const int64_t ia = broadcast_source(index, ba), ib = broadcast_source(index, bb);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = va[static_cast<size_t>(ia * m * k + (ta ? p * m + i : i * k + p))];
          const double y = vb[static_cast<size_t>(ib * k * n + (tb ? j * k + p : p * n + j))];
          s += x * y;
        }
        result[static_cast<size_t>((bi * m + i) * n + j)] = s;
      }
    }
  }
  return result;
}

Shape operand_shape(Shape batch, int64_t rows, int64_t cols, bool transposed) {
  batch.push_back(transposed ? cols : rows);
  batch.push_back(transposed ? rows : cols);
  return batch;
}

TEST_CASE("matmul matches the reference for 2-D and broadcast batched operands") {
  std::mt19937 rng(9);
  struct Case {
    Shape batch_a, batch_b;
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {
      {{}, {}, 1, 1, 1},  {{}, {}, 3, 4, 5},         {{}, {}, 17, 33, 9}, {{}, {}, 0, 3, 4},
      {{}, {}, 3, 0, 4},  {{}, {}, 3, 4, 0},         {{2}, {2}, 3, 4, 5}, {{2, 3}, {}, 4, 5, 6},
      {{}, {3}, 4, 5, 6}, {{2, 1}, {1, 3}, 2, 3, 2}, {{4}, {1}, 5, 2, 3}, {{0}, {}, 2, 2, 2},
      {{3}, {}, 1, 7, 1}};
  for (DType dtype : kNumericTypes) {
    for (const Case& c : cases) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = random_tensor(operand_shape(c.batch_a, c.m, c.k, ta), dtype, rng, -9, 9);
          Tensor b = random_tensor(operand_shape(c.batch_b, c.k, c.n, tb), dtype, rng, -9, 9);
          Shape shape;
          std::vector<double> want = ref_matmul(a, b, ta, tb, &shape);
          if (dtype == DType::kBF16) {
            for (double& w : want) w = round_to(w, dtype);
          }
          INFO(a.to_string() << (ta ? "^T" : "") << " x " << b.to_string() << (tb ? "^T" : ""));
          MatmulOptions options;
          options.transpose_a = ta;
          options.transpose_b = tb;
          check_values(matmul(a, b, options), shape, dtype, want,
                       is_integer(dtype) ? 0 : tolerance(dtype) * 20);
        }
      }
    }
  }
}

TEST_CASE("matmul of wide integers wraps") {
  const double big = 1 << 20;
  Tensor a = make({1, 2}, DType::kI32, {big, big});
  Tensor b = make({2, 1}, DType::kI32, {big, 1});
  // 2^40 + 2^20 wraps to 2^20 in 32 bits.
  CHECK(matmul(a, b).data<int32_t>()[0] == (1 << 20));
}

TEST_CASE("matmul_accumulate adds into the output") {
  std::mt19937 rng(10);
  for (DType dtype : {DType::kF32, DType::kF64}) {
    Tensor a = random_tensor({2, 3, 4}, dtype, rng);
    Tensor b = random_tensor({4, 5}, dtype, rng);
    Tensor out = random_tensor({2, 3, 5}, dtype, rng);
    std::vector<double> want = values(out);
    Shape shape;
    const auto prod = ref_matmul(a, b, false, false, &shape);
    for (size_t i = 0; i < want.size(); ++i) want[i] += prod[i];
    matmul_accumulate(a, b, out);
    check_values(out, shape, dtype, want, tolerance(dtype) * 10);
  }
  // bf16 operands accumulate into f32.
  Tensor a = random_tensor({3, 4}, DType::kBF16, rng);
  Tensor b = random_tensor({5, 4}, DType::kBF16, rng);
  Tensor out = Tensor::zeros({3, 5}, DType::kF32);
  MatmulOptions tb;
  tb.transpose_b = true;
  matmul_accumulate(a, b, out, tb);
  matmul_accumulate(a, b, out, tb);
  Shape shape;
  auto want = ref_matmul(a, b, false, true, &shape);
  for (double& w : want) w *= 2;
  check_values(out, shape, DType::kF32, want, 1e-5);
}

TEST_CASE("dense fuses bias and activation") {
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32}) {
    for (std::optional<UnaryOp> act :
         {std::optional<UnaryOp>(), std::optional(UnaryOp::kRelu), std::optional(UnaryOp::kSign)}) {
      for (bool with_bias : {false, true}) {
        Tensor x = random_tensor({2, 3, 4}, dtype, rng, -5, 5);
        Tensor w = random_tensor({4, 6}, dtype, rng, -5, 5);
        Tensor bias = random_tensor({6}, dtype, rng, -5, 5);
        Shape shape;
        std::vector<double> want = ref_matmul(x, w, false, false, &shape);
        const auto vb = values(bias);
        for (size_t i = 0; i < want.size(); ++i) {
          if (with_bias) want[i] += vb[i % 6];
          if (act) want[i] = ref_unary(*act, want[i]);
        }
        INFO(dtype_name(dtype) << " bias " << with_bias);
        check_values(dense(x, w, with_bias ? &bias : nullptr, act), shape, dtype, want,
                     is_integer(dtype) ? 0 : tolerance(dtype) * 20);
      }
    }
  }
  Tensor x = Tensor::zeros({2, 3}, DType::kF32);
  Tensor w = Tensor::zeros({3, 4}, DType::kF32);
  Tensor bad = Tensor::zeros({3}, DType::kF32);
  CHECK_THROWS_MATCHES(dense(x, w, &bad, std::nullopt), ShapeError,
                       Catch::Message("[dense] bias f32[3] does not match output f32[2,4]"));
  Tensor xi = Tensor::zeros({2, 3}, DType::kI32), wi = Tensor::zeros({3, 4}, DType::kI32);
  CHECK_THROWS_MATCHES(
      dense(xi, wi, nullptr, UnaryOp::kExp), DTypeError,
      Catch::Message("[dense] activation exp does not support i32: i32[2,3] x i32[3,4]"));
  Tensor bad_dtype = Tensor::zeros({4}, DType::kF64);
  CHECK_THROWS_MATCHES(dense(x, w, &bad_dtype, std::nullopt), DTypeError,
                       Catch::Message("[dense] bias f64[4] does not match output f32[2,4]"));
}

TEST_CASE("matmul errors name both operands") {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  Tensor b = Tensor::zeros({4, 5}, DType::kF32);
  CHECK_THROWS_MATCHES(matmul(a, b), ShapeError,
                       Catch::Message("[matmul] inner dims differ: f32[2,3] x f32[4,5]"));
  MatmulOptions ta;
  ta.transpose_a = true;
  CHECK_THROWS_MATCHES(matmul(a, b, ta), ShapeError,
                       Catch::Message("[matmul] inner dims differ: f32[2,3]^T x f32[4,5]"));
  CHECK_THROWS_MATCHES(matmul(Tensor::zeros({3}, DType::kF32), b), ShapeError,
                       Catch::Message("[matmul] operands must have rank >= 2: f32[3] x f32[4,5]"));
  CHECK_THROWS_MATCHES(matmul(a, Tensor::zeros({3, 4}, DType::kF64)), DTypeError,
                       Catch::Message("[matmul] dtypes differ: f32[2,3] x f64[3,4]"));
  Tensor bl = Tensor::zeros({2, 2}, DType::kBool);
  CHECK_THROWS_MATCHES(matmul(bl, bl), DTypeError,
                       Catch::Message("[matmul] unsupported dtype bool: bool[2,2] x bool[2,2]"));
  CHECK_THROWS_MATCHES(
      matmul(Tensor::zeros({2, 2, 3}, DType::kF32), Tensor::zeros({5, 3, 4}, DType::kF32)),
      ShapeError, Catch::Message("[matmul] batch dims do not broadcast: f32[2,2,3] x f32[5,3,4]"));
  // Zero-sized operands, so nothing is allocated, but m does not fit BLAS's int.
  CHECK_THROWS_MATCHES(
      matmul(Tensor::zeros({int64_t{1} << 31, 0}, DType::kF32), Tensor::zeros({0, 1}, DType::kF32)),
      InvalidArgumentError,
      Catch::Message(
          "[matmul] matrix dims exceed the BLAS int range: f32[2147483648,0] x f32[0,1]"));
  MatmulOptions negative;
  negative.blas_threads = -1;
  CHECK_THROWS_MATCHES(matmul(a, Tensor::zeros({3, 4}, DType::kF32), negative),
                       InvalidArgumentError,
                       Catch::Message("[matmul] blas_threads must be >= 0, got -1"));
  Tensor b34 = Tensor::zeros({3, 4}, DType::kF32);
  Tensor wrong = Tensor::zeros({2, 5}, DType::kF32);
  CHECK_THROWS_MATCHES(matmul_accumulate(a, b34, wrong), ShapeError,
                       Catch::Message("[matmul_accumulate] output f32[2,5] does not match f32[2,3] "
                                      "x f32[3,4] (expected [2,4])"));
  Tensor ints = Tensor::zeros({2, 4}, DType::kI32);
  CHECK_THROWS_MATCHES(
      matmul_accumulate(a, b34, ints), DTypeError,
      Catch::Message("[matmul_accumulate] output must be f32 or f64, got i32[2,4]"));
  Tensor f64 = Tensor::zeros({2, 4}, DType::kF64);
  CHECK_THROWS_MATCHES(
      matmul_accumulate(a, b34, f64), DTypeError,
      Catch::Message(
          "[matmul_accumulate] operands f32[2,3] x f32[3,4] do not match output f64[2,4]"));
  Tensor sq = Tensor::zeros({2, 2}, DType::kF32);
  CHECK_THROWS_MATCHES(
      matmul_accumulate(sq, sq, sq), InvalidArgumentError,
      Catch::Message("[matmul_accumulate] output f32[2,2] shares storage with an operand"));
  CHECK_THROWS_MATCHES(set_blas_threads(0), InvalidArgumentError,
                       Catch::Message("[set_blas_threads] thread count must be >= 1, got 0"));
}

TEST_CASE("kernels run concurrently on different tensors") {
  set_blas_threads(1);
  std::mt19937 rng(12);
  std::vector<Tensor> as, bs, want;
  for (int t = 0; t < 4; ++t) {
    as.push_back(random_tensor({32, 48}, DType::kF32, rng));
    bs.push_back(random_tensor({48, 16}, DType::kF32, rng));
    want.push_back(reduce(ReduceKind::kSum, matmul(as.back(), bs.back()), {0}, false));
  }
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      MatmulOptions options;
      options.blas_threads = 1;  // what every device thread passes: the setting is not changed
      const Tensor y = matmul(as[t], bs[t], options);
      const Tensor relu = unary(UnaryOp::kRelu, y);
      // relu(y) + (y - relu(y)) == y
      const Tensor same = binary(BinaryOp::kAdd, relu, binary(BinaryOp::kSub, y, relu));
      got[t] = reduce(ReduceKind::kSum, same, {0}, false);
    });
  }
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < 4; ++t) check_values(got[t], {16}, DType::kF32, values(want[t]), 1e-5);
}

// ================================================================================================
// Reductions
// ================================================================================================

std::vector<double> ref_reduce(ReduceKind kind, const Tensor& x, const std::vector<bool>& reduced,
                               Shape* out_shape, bool keepdims) {
  out_shape->clear();
  Shape full;  // keepdims shape
  for (size_t d = 0; d < reduced.size(); ++d) {
    full.push_back(reduced[d] ? 1 : x.shape()[d]);
    if (!reduced[d])
      out_shape->push_back(x.shape()[d]);
    else if (keepdims)
      out_shape->push_back(1);
  }
  const int64_t n = num_elements(full);
  const bool integer = is_integer(x.dtype()) || x.dtype() == DType::kBool;
  double init = 0;
  if (kind == ReduceKind::kProd) init = 1;
  if (kind == ReduceKind::kMax) init = x.dtype() == DType::kBool ? 0 : -kInf;
  if (kind == ReduceKind::kMin) init = x.dtype() == DType::kBool ? 1 : kInf;
  std::vector<double> acc(static_cast<size_t>(n), init);
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  const auto vx = values(x);
  for (size_t i = 0; i < vx.size(); ++i) {
    auto index = unravel(static_cast<int64_t>(i), x.shape());
    for (size_t d = 0; d < reduced.size(); ++d) {
      if (reduced[d]) index[d] = 0;
    }
    const size_t o = static_cast<size_t>(ravel(index, full));
    const double v = vx[i];
    double& a = acc[o];
    switch (kind) {
      case ReduceKind::kSum:
      case ReduceKind::kMean:
        a += v;
        break;
      case ReduceKind::kProd:
        a *= v;
        break;
      case ReduceKind::kMax:
        a = std::isnan(a) || std::isnan(v) ? kNaN : std::max(a, v);
        break;
      case ReduceKind::kMin:
        a = std::isnan(a) || std::isnan(v) ? kNaN : std::min(a, v);
        break;
    }
    ++count[o];
  }
  for (size_t o = 0; o < acc.size(); ++o) {
    if (kind == ReduceKind::kMean) {
      if (count[o] == 0) {
        acc[o] = integer ? 0 : kNaN;
      } else {
        acc[o] = integer ? std::trunc(acc[o] / static_cast<double>(count[o]))
                         : acc[o] / static_cast<double>(count[o]);
      }
    }
    if (integer && std::isinf(acc[o])) {
      acc[o] = acc[o] > 0 ? static_cast<double>(x.dtype() == DType::kI32
                                                    ? std::numeric_limits<int32_t>::max()
                                                    : std::numeric_limits<int64_t>::max())
                          : static_cast<double>(x.dtype() == DType::kI32
                                                    ? std::numeric_limits<int32_t>::lowest()
                                                    : std::numeric_limits<int64_t>::lowest());
    }
  }
  return acc;
}

// Every subset of axes, written with positive and negative numbers alternately.
std::vector<std::vector<int64_t>> axis_subsets(int64_t rank) {
  std::vector<std::vector<int64_t>> subsets;
  for (int64_t mask = 0; mask < (int64_t{1} << rank); ++mask) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask & (int64_t{1} << d)) axes.push_back(axes.size() % 2 ? d - rank : d);
    }
    subsets.push_back(axes);
  }
  return subsets;
}

TEST_CASE("reduce matches the reference for every axis subset") {
  std::mt19937 rng(13);
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({3, 70});
  shapes.push_back({70, 3});
  shapes.push_back({600, 5});  // several row chunks
  shapes.push_back({2, 1100});
  for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin,
                          ReduceKind::kProd}) {
    for (DType dtype : kNumericTypes) {
      for (const Shape& shape : shapes) {
        const bool prod = kind == ReduceKind::kProd;
        Tensor x = is_integer(dtype)
                       ? random_tensor(shape, dtype, rng, prod ? -2 : -50, prod ? 2 : 50)
                       : random_tensor(shape, dtype, rng, prod ? 0.9 : -2, prod ? 1.1 : 2);
        for (const auto& axes : axis_subsets(static_cast<int64_t>(shape.size()))) {
          for (bool keepdims : {false, true}) {
            std::vector<bool> reduced(shape.size(), axes.empty());
            for (int64_t a : axes)
              reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(shape.size()) : a)] =
                  true;
            Shape out_shape;
            std::vector<double> want = ref_reduce(kind, x, reduced, &out_shape, keepdims);
            if (prod && is_integer(dtype)) {
              // Products of many small integers overflow: compare only when the reference fits.
              bool fits =
                  std::all_of(want.begin(), want.end(), [](double w) { return std::abs(w) < 1e9; });
              if (!fits) continue;
            }
            INFO(reduce_kind_name(kind)
                 << " " << x.to_string() << " axes " << axes.size() << " keepdims " << keepdims);
            check_values(reduce(kind, x, axes, keepdims), out_shape, dtype, want,
                         tolerance(dtype) * (dtype == DType::kBF16 ? 1 : 10));
          }
        }
      }
    }
  }
}

TEST_CASE("reduce of bool, NaN and empty dims") {
  Tensor b = make({2, 3}, DType::kBool, {1, 0, 0, 0, 0, 0});
  check_values(reduce(ReduceKind::kMax, b, {1}, false), {2}, DType::kBool, {1, 0}, 0);
  check_values(reduce(ReduceKind::kMin, b, {}, false), {}, DType::kBool, {0}, 0);
  Tensor nan = make({2, 2}, DType::kF32, {1, kNaN, 2, 3});
  check_values(reduce(ReduceKind::kMax, nan, {1}, false), {2}, DType::kF32, {kNaN, 3}, 0);
  check_values(reduce(ReduceKind::kMin, nan, {0}, false), {2}, DType::kF32, {1, kNaN}, 0);
  Tensor empty = Tensor::zeros({2, 0}, DType::kF64);
  check_values(reduce(ReduceKind::kSum, empty, {1}, false), {2}, DType::kF64, {0, 0}, 0);
  check_values(reduce(ReduceKind::kMax, empty, {-1}, true), {2, 1}, DType::kF64, {-kInf, -kInf}, 0);
  check_values(reduce(ReduceKind::kMean, empty, {1}, false), {2}, DType::kF64, {kNaN, kNaN}, 0);
  check_values(reduce(ReduceKind::kProd, empty, {1}, false), {2}, DType::kF64, {1, 1}, 0);
  Tensor iempty = Tensor::zeros({0, 2}, DType::kI32);
  check_values(reduce(ReduceKind::kMax, iempty, {0}, false), {2}, DType::kI32,
               {static_cast<double>(std::numeric_limits<int32_t>::lowest()),
                static_cast<double>(std::numeric_limits<int32_t>::lowest())},
               0);
  check_values(reduce(ReduceKind::kMean, iempty, {0}, false), {2}, DType::kI32, {0, 0}, 0);
  check_values(reduce(ReduceKind::kMean, make({3}, DType::kI64, {-1, -2, -2}), {}, false), {},
               DType::kI64, {-1}, 0);
  // Float sums accumulate in f64: a million f32 0.1s sum to the correctly rounded result (f32
  // accumulators would be off in the fifth digit), over the last axis and over axis 0.
  const int64_t n = 1 << 20;
  const double tenth = static_cast<double>(0.1f);
  Tensor tenths = make({n}, DType::kF32, std::vector<double>(static_cast<size_t>(n), tenth));
  CHECK(reduce(ReduceKind::kSum, tenths, {}, false).data<float>()[0] ==
        static_cast<float>(tenth * n));
  CHECK(reduce(ReduceKind::kSum, tenths.reshaped({n / 2, 2}), {0}, false).data<float>()[1] ==
        static_cast<float>(tenth * (n / 2)));
}

TEST_CASE("reduce errors") {
  Tensor x = Tensor::zeros({2, 3}, DType::kF32);
  CHECK_THROWS_MATCHES(reduce(ReduceKind::kSum, x, {2}, false), InvalidArgumentError,
                       Catch::Message("[reduce_sum] axis 2 is out of range for f32[2,3]"));
  CHECK_THROWS_MATCHES(reduce(ReduceKind::kMean, x, {-3}, false), InvalidArgumentError,
                       Catch::Message("[reduce_mean] axis -3 is out of range for f32[2,3]"));
  CHECK_THROWS_MATCHES(reduce(ReduceKind::kMax, x, {1, -1}, false), InvalidArgumentError,
                       Catch::Message("[reduce_max] duplicate axis -1 in [1,-1] for f32[2,3]"));
  CHECK_THROWS_MATCHES(reduce(ReduceKind::kSum, Tensor::zeros({2}, DType::kBool), {}, false),
                       DTypeError, Catch::Message("[reduce_sum] unsupported dtype bool: bool[2]"));
}

TEST_CASE("argmax and argmin take the first extreme along an axis") {
  std::mt19937 rng(14);
  const std::vector<Shape> shapes = {{5}, {3, 4}, {4, 1}, {2, 3, 4}, {40, 9}, {9, 40}};
  for (DType dtype : kNumericTypes) {
    for (const Shape& shape : shapes) {
      // Few distinct values: ties are frequent.
      Tensor x = make(shape, dtype, values(random_tensor(shape, DType::kI32, rng, -3, 3)));
      const auto vx = values(x);
      const int64_t rank = static_cast<int64_t>(shape.size());
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const int64_t ax = axis < 0 ? axis + rank : axis;
        for (bool keepdims : {false, true}) {
          for (bool is_max : {true, false}) {
            Shape out_shape = shape;
            out_shape[static_cast<size_t>(ax)] = 1;
            std::vector<double> want(static_cast<size_t>(num_elements(out_shape)));
            for (size_t o = 0; o < want.size(); ++o) {
              auto index = unravel(static_cast<int64_t>(o), out_shape);
              double best = 0;
              int64_t best_r = -1;
              for (int64_t r = 0; r < shape[static_cast<size_t>(ax)]; ++r) {
                index[static_cast<size_t>(ax)] = r;
                const double v = vx[static_cast<size_t>(ravel(index, shape))];
                if (best_r < 0 || (is_max ? v > best : v < best)) {
                  best = v;
                  best_r = r;
                }
              }
              want[o] = static_cast<double>(best_r);
            }
            if (!keepdims) out_shape.erase(out_shape.begin() + ax);
            Tensor got = is_max ? argmax(x, axis, keepdims) : argmin(x, axis, keepdims);
            check_values(got, out_shape, DType::kI64, want, 0);
          }
        }
      }
    }
  }
  Tensor nan = make({5}, DType::kF32, {1, kNaN, 5, kNaN, 0});
  CHECK(argmax(nan, 0, false).data<int64_t>()[0] == 1);
  CHECK(argmin(nan, 0, false).data<int64_t>()[0] == 1);
  Tensor nan_cols = make({3, 2}, DType::kF64, {1, 0, kNaN, 2, 4, kNaN});
  check_values(argmax(nan_cols, 0, false), {2}, DType::kI64, {1, 2}, 0);
  CHECK_THROWS_MATCHES(argmax(Tensor::zeros({2, 0}, DType::kF32), 1, false), InvalidArgumentError,
                       Catch::Message("[argmax] cannot reduce over empty axis 1 of f32[2,0]"));
  CHECK_THROWS_MATCHES(argmin(Tensor::zeros({2}, DType::kF32), 1, false), InvalidArgumentError,
                       Catch::Message("[argmin] axis 1 is out of range for f32[2]"));
  CHECK_THROWS_MATCHES(argmax(Tensor::zeros({2}, DType::kBool), 0, false), DTypeError,
                       Catch::Message("[argmax] unsupported dtype bool: bool[2]"));
}

// ================================================================================================
// Softmax family and cross-entropy
// ================================================================================================

// Reference log-sum-exp along `axis` for every output position.
std::vector<double> ref_lse(const Tensor& x, int64_t axis, Shape* out_shape) {
  *out_shape = x.shape();
  (*out_shape)[static_cast<size_t>(axis)] = 1;
  const auto vx = values(x);
  std::vector<double> out(static_cast<size_t>(num_elements(*out_shape)));
  for (size_t o = 0; o < out.size(); ++o) {
    auto index = unravel(static_cast<int64_t>(o), *out_shape);
    double m = -kInf;
    for (int64_t r = 0; r < x.dim(axis); ++r) {
      index[static_cast<size_t>(axis)] = r;
      m = std::max(m, vx[static_cast<size_t>(ravel(index, x.shape()))]);
    }
    if (!std::isfinite(m)) m = 0;
    double s = 0;
    for (int64_t r = 0; r < x.dim(axis); ++r) {
      index[static_cast<size_t>(axis)] = r;
      s += std::exp(vx[static_cast<size_t>(ravel(index, x.shape()))] - m);
    }
    out[o] = m + std::log(s);
  }
  return out;
}

TEST_CASE("softmax, log_softmax and logsumexp match the reference") {
  std::mt19937 rng(15);
  const std::vector<Shape> shapes = {{5}, {3, 4}, {2, 3, 4}, {1, 7}, {0, 3}, {3, 0}, {50, 33}};
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : shapes) {
      Tensor x = random_tensor(shape, dtype, rng, -8, 8);
      const auto vx = values(x);
      const int64_t rank = static_cast<int64_t>(shape.size());
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const int64_t ax = axis < 0 ? axis + rank : axis;
        Shape lse_shape;
        const auto lse = ref_lse(x, ax, &lse_shape);
        std::vector<double> sm(vx.size()), lsm(vx.size());
        for (size_t i = 0; i < vx.size(); ++i) {
          auto index = unravel(static_cast<int64_t>(i), shape);
          index[static_cast<size_t>(ax)] = 0;
          const double l = lse[static_cast<size_t>(ravel(index, lse_shape))];
          lsm[i] = vx[i] - l;
          sm[i] = std::exp(lsm[i]);
        }
        INFO(x.to_string() << " axis " << axis);
        check_values(softmax(x, axis), shape, dtype, sm, tolerance(dtype));
        check_values(log_softmax(x, axis), shape, dtype, lsm, tolerance(dtype) * 2);
        check_values(logsumexp(x, axis, true), lse_shape, dtype, lse, tolerance(dtype));
        Shape dropped = shape;
        dropped.erase(dropped.begin() + ax);
        check_values(logsumexp(x, axis, false), dropped, dtype, lse, tolerance(dtype));
      }
    }
  }
  // Large values stay finite; rows of -inf give -inf for logsumexp.
  Tensor big = make({1, 3}, DType::kF32, {1000, 1000, -kInf});
  check_values(softmax(big, 1), {1, 3}, DType::kF32, {0.5, 0.5, 0}, 1e-6);
  check_values(logsumexp(make({2, 2}, DType::kF64, {-kInf, -kInf, 0, 0}), 1, false), {2},
               DType::kF64, {-kInf, std::log(2.0)}, 1e-12);
  check_values(logsumexp(Tensor::zeros({2, 0}, DType::kF32), 1, false), {2}, DType::kF32,
               {-kInf, -kInf}, 0);
  CHECK_THROWS_MATCHES(softmax(Tensor::zeros({2}, DType::kI32), 0), DTypeError,
                       Catch::Message("[softmax] unsupported dtype i32: i32[2]"));
  CHECK_THROWS_MATCHES(log_softmax(Tensor::zeros({2}, DType::kF32), -2), InvalidArgumentError,
                       Catch::Message("[log_softmax] axis -2 is out of range for f32[2]"));
}

TEST_CASE("softmax family defines +inf, -inf and NaN rows and keeps large-logit precision") {
  // Regressions: a finite element that overflowed exp() beside a +inf (shift 0) gave inf * 0 =
  // NaN instead of 0; log_softmax computed x - (max + log(sum)) in f32, which rounds to the ulp
  // of x (0.0625 at 1e6).
  Tensor x = make({4, 3}, DType::kF32,
                  {kInf, 100, 1,         // +inf beside a large finite value
                   -kInf, -kInf, -kInf,  // all -inf
                   1, kNaN, 2,           // NaN
                   1e6, 1e6 + 1, 1e6 + 2});
  Tensor sm = softmax(x, 1), ls = log_softmax(x, 1), lse = logsumexp(x, 1, false);
  const float* s = sm.data<float>();
  const float* l = ls.data<float>();
  CHECK(std::isnan(s[0]));
  CHECK(s[1] == 0.0f);
  CHECK(s[2] == 0.0f);
  CHECK(std::isnan(l[0]));
  CHECK(l[1] == -std::numeric_limits<float>::infinity());
  for (int i = 3; i < 9; ++i) CHECK((std::isnan(s[i]) && std::isnan(l[i])));
  CHECK(lse.data<float>()[0] == std::numeric_limits<float>::infinity());
  CHECK(lse.data<float>()[1] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(lse.data<float>()[2]));
  const double l3 = std::log(1 + std::exp(1.0) + std::exp(2.0));
  CHECK(l[9] == Approx(-l3).epsilon(1e-6));
  CHECK(l[10] == Approx(1 - l3).epsilon(1e-6));
  CHECK(l[11] == Approx(2 - l3).epsilon(1e-6));
  check_values(softmax_shift(make({4}, DType::kF32, {kInf, -kInf, kNaN, -3})), {4}, DType::kF32,
               {std::numeric_limits<float>::max(), 0, 0, -3}, 0);
}

TEST_CASE("sparse softmax cross-entropy and its gradient") {
  std::mt19937 rng(16);
  for (DType dtype : kFloatTypes) {
    for (DType label_dtype : {DType::kI32, DType::kI64}) {
      for (const Shape& rows : {Shape{}, Shape{4}, Shape{2, 3}, Shape{0}}) {
        const int64_t classes = 5;
        Shape shape = rows;
        shape.push_back(classes);
        Tensor logits = random_tensor(shape, dtype, rng, -4, 4);
        Tensor labels = random_tensor(rows, label_dtype, rng, 0, classes - 1);
        Tensor grad = random_tensor(rows, dtype, rng, -2, 2);
        const auto vx = values(logits), vl = values(labels), vg = values(grad);
        std::vector<double> loss(vl.size()), dx(vx.size());
        for (size_t r = 0; r < vl.size(); ++r) {
          double m = -kInf, s = 0;
          for (int64_t c = 0; c < classes; ++c) m = std::max(m, vx[r * classes + c]);
          for (int64_t c = 0; c < classes; ++c) s += std::exp(vx[r * classes + c] - m);
          const double lse = m + std::log(s);
          loss[r] = lse - vx[r * classes + static_cast<size_t>(vl[r])];
          for (int64_t c = 0; c < classes; ++c) {
            const double p = std::exp(vx[r * classes + c] - lse);
            dx[r * classes + c] = (p - (c == vl[r] ? 1 : 0)) * vg[r];
          }
        }
        check_values(sparse_softmax_cross_entropy(logits, labels), rows, dtype, loss,
                     tolerance(dtype) * 2);
        check_values(sparse_softmax_cross_entropy_grad(logits, labels, grad), shape, dtype, dx,
                     tolerance(dtype) * 2);
      }
    }
  }
}

TEST_CASE("sparse cross-entropy gradient matches finite differences") {
  std::mt19937 rng(17);
  Tensor logits = random_tensor({3, 4}, DType::kF64, rng, -3, 3);
  Tensor labels = make({3}, DType::kI64, {0, 3, 2});
  Tensor grad = random_tensor({3}, DType::kF64, rng, -1, 1);
  auto loss = [&](const Tensor& x) { return dot(sparse_softmax_cross_entropy(x, labels), grad); };
  check_values(sparse_softmax_cross_entropy_grad(logits, labels, grad), {3, 4}, DType::kF64,
               numeric_gradient(logits, loss), 1e-7);
}

TEST_CASE("cross-entropy errors") {
  Tensor logits = Tensor::zeros({2, 3}, DType::kF32);
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(logits, make({2}, DType::kI32, {0, 3})), InvalidArgumentError,
      Catch::Message("[sparse_softmax_cross_entropy] label 3 at position [1] is outside [0, 3)"));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(Tensor::zeros({2, 2, 3}, DType::kF32),
                                   make({2, 2}, DType::kI64, {0, 1, 2, -1})),
      InvalidArgumentError,
      Catch::Message(
          "[sparse_softmax_cross_entropy] label -1 at position [1,1] is outside [0, 3)"));
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(logits, Tensor::zeros({3}, DType::kI32)),
                       ShapeError,
                       Catch::Message("[sparse_softmax_cross_entropy] labels i32[3] do not match "
                                      "logits f32[2,3]"));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(logits, Tensor::zeros({2}, DType::kF32)), DTypeError,
      Catch::Message("[sparse_softmax_cross_entropy] labels must be i32 or i64, got f32[2]"));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy(Tensor::zeros({}, DType::kF32), Tensor::zeros({}, DType::kI32)),
      ShapeError,
      Catch::Message("[sparse_softmax_cross_entropy] logits must have rank >= 1, got f32[]"));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy_grad(logits, Tensor::zeros({2}, DType::kI32),
                                        Tensor::zeros({3}, DType::kF32)),
      ShapeError,
      Catch::Message(
          "[sparse_softmax_cross_entropy_grad] grad f32[3] does not match labels i32[2]"));
  CHECK_THROWS_MATCHES(
      sparse_softmax_cross_entropy_grad(logits, Tensor::zeros({2}, DType::kI32),
                                        Tensor::zeros({2}, DType::kF64)),
      DTypeError,
      Catch::Message(
          "[sparse_softmax_cross_entropy_grad] grad f64[2] does not match logits f32[2,3]"));
}

TEST_CASE("one_hot puts on at the index and off elsewhere") {
  Tensor idx = make({2, 2}, DType::kI32, {0, 2, -1, 3});
  check_values(one_hot(idx, 3, DType::kF32), {2, 2, 3}, DType::kF32,
               {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, 0);
  check_values(one_hot(make({2}, DType::kI64, {1, 0}), 2, DType::kI32, 5, -1), {2, 2}, DType::kI32,
               {-1, 5, 5, -1}, 0);
  check_values(one_hot(make({}, DType::kI64, {1}), 2, DType::kBool), {2}, DType::kBool, {0, 1}, 0);
  check_values(one_hot(make({2}, DType::kI64, {1, 0}), 0, DType::kBF16), {2, 0}, DType::kBF16, {},
               0);
  CHECK_THROWS_MATCHES(one_hot(idx, -1, DType::kF32), InvalidArgumentError,
                       Catch::Message("[one_hot] depth must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(one_hot(Tensor::zeros({2}, DType::kF32), 3, DType::kF32), DTypeError,
                       Catch::Message("[one_hot] indices must be i32 or i64, got f32[2]"));
}

// ================================================================================================
// Layer norm
// ================================================================================================

TEST_CASE("layer_norm matches the reference") {
  std::mt19937 rng(18);
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : {Shape{5}, Shape{3, 8}, Shape{2, 3, 16}, Shape{0, 4}}) {
      const int64_t d = shape.back();
      Tensor x = random_tensor(shape, dtype, rng, -3, 3);
      Tensor gamma = random_tensor({d}, dtype, rng, 0.5, 1.5);
      Tensor beta = random_tensor({d}, dtype, rng, -1, 1);
      const double eps = 1e-5;
      const auto vx = values(x), vg = values(gamma), vb = values(beta);
      const size_t rows = vx.size() / static_cast<size_t>(d);
      std::vector<double> y(vx.size()), mean(rows), rstd(rows);
      for (size_t r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < d; ++j) m += vx[r * d + j];
        m /= static_cast<double>(d);
        for (int64_t j = 0; j < d; ++j) v += (vx[r * d + j] - m) * (vx[r * d + j] - m);
        v /= static_cast<double>(d);
        mean[r] = m;
        rstd[r] = 1 / std::sqrt(v + eps);
        for (int64_t j = 0; j < d; ++j) {
          y[r * d + j] = (vx[r * d + j] - m) * rstd[r] * vg[j] + vb[j];
        }
      }
      Shape stats = shape;
      stats.back() = 1;
      const DType stats_dtype = dtype == DType::kBF16 ? DType::kF32 : dtype;
      LayerNormResult result = layer_norm(x, gamma, beta, eps);
      check_values(result.y, shape, dtype, y, tolerance(dtype) * 10);
      check_values(result.mean, stats, stats_dtype, mean, tolerance(stats_dtype) * 10);
      check_values(result.rstd, stats, stats_dtype, rstd, tolerance(stats_dtype) * 10);
    }
  }
}

TEST_CASE("layer_norm_grad matches finite differences") {
  std::mt19937 rng(19);
  for (const Shape& shape : {Shape{6}, Shape{3, 5}, Shape{2, 2, 4}}) {
    const int64_t d = shape.back();
    Tensor x = random_tensor(shape, DType::kF64, rng, -2, 2);
    Tensor gamma = random_tensor({d}, DType::kF64, rng, 0.5, 1.5);
    Tensor beta = random_tensor({d}, DType::kF64, rng, -1, 1);
    Tensor dy = random_tensor(shape, DType::kF64, rng, -1, 1);
    const double eps = 1e-3;
    LayerNormResult r = layer_norm(x, gamma, beta, eps);
    LayerNormGrad g = layer_norm_grad(dy, x, gamma, r.mean, r.rstd);
    auto loss_x = [&](const Tensor& t) { return dot(layer_norm(t, gamma, beta, eps).y, dy); };
    auto loss_g = [&](const Tensor& t) { return dot(layer_norm(x, t, beta, eps).y, dy); };
    auto loss_b = [&](const Tensor& t) { return dot(layer_norm(x, gamma, t, eps).y, dy); };
    check_values(g.dx, shape, DType::kF64, numeric_gradient(x, loss_x), 1e-6);
    check_values(g.dgamma, {d}, DType::kF64, numeric_gradient(gamma, loss_g), 1e-6);
    check_values(g.dbeta, {d}, DType::kF64, numeric_gradient(beta, loss_b), 1e-6);
  }
  // f32 and bf16 agree with f64.
  Tensor x = random_tensor({4, 8}, DType::kF64, rng);
  Tensor gamma = random_tensor({8}, DType::kF64, rng, 0.5, 1.5);
  Tensor dy = random_tensor({4, 8}, DType::kF64, rng);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // Inputs exactly representable in the lower precision: round them first.
    Tensor xl = cast(x, dtype), gl = cast(gamma, dtype), dyl = cast(dy, dtype);
    LayerNormResult rl = layer_norm(xl, gl, gl, 1e-5);
    LayerNormResult r64 =
        layer_norm(cast(xl, DType::kF64), cast(gl, DType::kF64), cast(gl, DType::kF64), 1e-5);
    LayerNormGrad g64 = layer_norm_grad(cast(dyl, DType::kF64), cast(xl, DType::kF64),
                                        cast(gl, DType::kF64), r64.mean, r64.rstd);
    LayerNormGrad gl_ = layer_norm_grad(dyl, xl, gl, rl.mean, rl.rstd);
    check_values(gl_.dx, {4, 8}, dtype, values(g64.dx), tolerance(dtype) * 20);
    check_values(gl_.dgamma, {8}, dtype, values(g64.dgamma), tolerance(dtype) * 20);
    check_values(gl_.dbeta, {8}, dtype, values(g64.dbeta), tolerance(dtype) * 20);
  }
}

TEST_CASE("layer_norm errors") {
  Tensor x = Tensor::zeros({2, 4}, DType::kF32);
  Tensor g = Tensor::zeros({4}, DType::kF32);
  CHECK_THROWS_MATCHES(
      layer_norm(x, Tensor::zeros({3}, DType::kF32), g, 1e-5), ShapeError,
      Catch::Message("[layer_norm] gamma f32[3] must have shape [4] for x f32[2,4]"));
  CHECK_THROWS_MATCHES(layer_norm(x, g, Tensor::zeros({4}, DType::kF64), 1e-5), DTypeError,
                       Catch::Message("[layer_norm] beta f64[4] does not match x f32[2,4]"));
  CHECK_THROWS_MATCHES(layer_norm(x, g, g, -1), InvalidArgumentError,
                       Catch::Message("[layer_norm] eps must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(layer_norm(Tensor::zeros({}, DType::kF32), g, g, 1e-5), ShapeError,
                       Catch::Message("[layer_norm] x must have rank >= 1, got f32[]"));
  CHECK_THROWS_MATCHES(layer_norm(Tensor::zeros({4}, DType::kI32), g, g, 1e-5), DTypeError,
                       Catch::Message("[layer_norm] unsupported dtype i32: i32[4]"));
  LayerNormResult r = layer_norm(x, g, g, 1e-5);
  CHECK_THROWS_MATCHES(layer_norm_grad(Tensor::zeros({2, 3}, DType::kF32), x, g, r.mean, r.rstd),
                       ShapeError,
                       Catch::Message("[layer_norm_grad] dy f32[2,3] does not match x f32[2,4]"));
  CHECK_THROWS_MATCHES(layer_norm_grad(Tensor::zeros({2, 4}, DType::kF64), x, g, r.mean, r.rstd),
                       DTypeError,
                       Catch::Message("[layer_norm_grad] dy f64[2,4] does not match x f32[2,4]"));
  CHECK_THROWS_MATCHES(
      layer_norm_grad(x, x, g, Tensor::zeros({2}, DType::kF32), r.rstd), ShapeError,
      Catch::Message(
          "[layer_norm_grad] mean f32[2] does not match x f32[2,4] (expected f32[2,1])"));
  CHECK_THROWS_MATCHES(
      layer_norm_grad(x, x, g, r.mean, Tensor::zeros({2, 1}, DType::kF64)), DTypeError,
      Catch::Message(
          "[layer_norm_grad] rstd f64[2,1] does not match x f32[2,4] (expected f32[2,1])"));
}

// ================================================================================================
// Data movement
// ================================================================================================

TEST_CASE("transpose matches the reference for every permutation") {
  std::mt19937 rng(20);
  const std::vector<Shape> shapes = {{},        {5},       {3, 4},       {40, 70},     {2, 3, 4},
                                     {1, 5, 1}, {2, 0, 3}, {2, 3, 4, 5}, {3, 1, 33, 2}};
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kBool}) {
    for (const Shape& shape : shapes) {
      Tensor x = random_tensor(shape, dtype, rng, -9, 9);
      const auto vx = values(x);
      std::vector<int64_t> perm(shape.size());
      std::iota(perm.begin(), perm.end(), 0);
      do {
        Shape out_shape(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) out_shape[i] = shape[static_cast<size_t>(perm[i])];
        std::vector<double> want(vx.size());
        for (size_t i = 0; i < want.size(); ++i) {
          const auto oi = unravel(static_cast<int64_t>(i), out_shape);
          std::vector<int64_t> ii(shape.size());
          for (size_t j = 0; j < perm.size(); ++j) ii[static_cast<size_t>(perm[j])] = oi[j];
          want[i] = vx[static_cast<size_t>(ravel(ii, shape))];
        }
        INFO(x.to_string() << " perm " << perm.size());
        check_values(transpose(x, perm), out_shape, dtype, want, 0);
      } while (std::next_permutation(perm.begin(), perm.end()));
    }
  }
  Tensor x = Tensor::zeros({2, 3}, DType::kF32);
  CHECK_THROWS_MATCHES(
      transpose(x, {0, 0}), InvalidArgumentError,
      Catch::Message("[transpose] perm [0,0] is not a permutation of the axes of f32[2,3]"));
  CHECK_THROWS_MATCHES(
      transpose(x, {1}), InvalidArgumentError,
      Catch::Message("[transpose] perm [1] is not a permutation of the axes of f32[2,3]"));
  CHECK_THROWS_MATCHES(
      transpose(x, {1, 2}), InvalidArgumentError,
      Catch::Message("[transpose] perm [1,2] is not a permutation of the axes of f32[2,3]"));
}

TEST_CASE("concat joins along any axis") {
  std::mt19937 rng(21);
  for (DType dtype : {DType::kF32, DType::kI64, DType::kBool, DType::kBF16}) {
    const Shape base = {2, 3, 4};
    for (int64_t axis = -3; axis < 3; ++axis) {
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      std::vector<Tensor> parts;
      std::vector<int64_t> sizes = {1, 0, 3, 2};
      for (int64_t s : sizes) {
        Shape shape = base;
        shape[ax] = s;
        parts.push_back(random_tensor(shape, dtype, rng, -9, 9));
      }
      Shape out_shape = base;
      out_shape[ax] = 6;
      std::vector<double> want(static_cast<size_t>(num_elements(out_shape)));
      for (size_t i = 0; i < want.size(); ++i) {
        auto index = unravel(static_cast<int64_t>(i), out_shape);
        size_t p = 0;
        while (index[ax] >= sizes[p]) index[ax] -= sizes[p++];
        want[i] = values(parts[p])[static_cast<size_t>(ravel(index, parts[p].shape()))];
      }
      check_values(concat(parts, axis), out_shape, dtype, want, 0);
    }
  }
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  CHECK_THROWS_MATCHES(concat({}, 0), InvalidArgumentError,
                       Catch::Message("[concat] needs at least one tensor"));
  CHECK_THROWS_MATCHES(concat({a, Tensor::zeros({2, 3}, DType::kF64)}, 0), DTypeError,
                       Catch::Message("[concat] dtypes differ: f32[2,3] vs f64[2,3]"));
  CHECK_THROWS_MATCHES(
      concat({a, Tensor::zeros({3, 3}, DType::kF32)}, 1), ShapeError,
      Catch::Message("[concat] shapes differ outside axis 1: f32[2,3] vs f32[3,3]"));
  CHECK_THROWS_MATCHES(concat({a, Tensor::zeros({2}, DType::kF32)}, 0), ShapeError,
                       Catch::Message("[concat] shapes differ outside axis 0: f32[2,3] vs f32[2]"));
  CHECK_THROWS_MATCHES(concat({a}, 2), InvalidArgumentError,
                       Catch::Message("[concat] axis 2 is out of range for f32[2,3]"));
  CHECK_THROWS_MATCHES(concat({Tensor::zeros({}, DType::kF32)}, 0), ShapeError,
                       Catch::Message("[concat] cannot concatenate scalars: f32[]"));
}

TEST_CASE("slice and pad are adjoint") {
  std::mt19937 rng(22);
  Tensor x = random_tensor({4, 5, 6}, DType::kF64, rng);
  const std::vector<int64_t> begin = {1, 0, 2};
  const Shape size = {2, -1, 3};
  Tensor s = slice(x, begin, size);
  const auto vx = values(x);
  std::vector<double> want;
  for (int64_t i = 1; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      for (int64_t k = 2; k < 5; ++k) want.push_back(vx[static_cast<size_t>((i * 5 + j) * 6 + k)]);
    }
  }
  check_values(s, {2, 5, 3}, DType::kF64, want, 0);
  // <slice(x), y> == <x, pad(y)>
  Tensor y = random_tensor({2, 5, 3}, DType::kF64, rng);
  Tensor p = pad(y, {{1, 1}, {0, 0}, {2, 1}});
  CHECK(p.shape() == Shape{4, 5, 6});
  CHECK(dot(s, y) == Approx(dot(x, p)).epsilon(1e-12));
  check_values(pad(make({2}, DType::kI32, {7, 8}), {{1, 2}}, -1), {5}, DType::kI32,
               {-1, 7, 8, -1, -1}, 0);
  check_values(pad(make({}, DType::kBool, {1}), {}, 0), {}, DType::kBool, {1}, 0);
  check_values(slice(x, {4, 5, 6}, {-1, 0, -1}), {0, 0, 0}, DType::kF64, {}, 0);
  CHECK_THROWS_MATCHES(slice(x, {0, 0}, {1, 1, 1}), InvalidArgumentError,
                       Catch::Message("[slice] begin [0,0] and size [1,1,1] do not match the rank "
                                      "of f64[4,5,6]"));
  CHECK_THROWS_MATCHES(
      slice(x, {3, 0, 0}, {2, 1, 1}), InvalidArgumentError,
      Catch::Message("[slice] box at [3,0,0] of size [2,1,1] does not fit f64[4,5,6]"));
  CHECK_THROWS_MATCHES(
      slice(x, {-1, 0, 0}, {1, 1, 1}), InvalidArgumentError,
      Catch::Message("[slice] box at [-1,0,0] of size [1,1,1] does not fit f64[4,5,6]"));
  CHECK_THROWS_MATCHES(
      pad(x, {{0, 0}}), InvalidArgumentError,
      Catch::Message("[pad] paddings [(0,0)] do not match the rank of f64[4,5,6]"));
  CHECK_THROWS_MATCHES(
      pad(x, {{0, 0}, {-1, 0}, {0, 0}}), InvalidArgumentError,
      Catch::Message("[pad] paddings [(0,0),(-1,0),(0,0)] must be non-negative for f64[4,5,6]"));
}

TEST_CASE("gather_shard_rows and scatter_add_shard_rows are gather and scatter_add on row shards") {
  std::mt19937 rng(29);
  const int64_t vocab = 7;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16}) {
    const Tensor table = random_tensor({vocab, 3}, dtype, rng, -9, 9);
    for (const Shape& ishape : {Shape{}, Shape{5}, Shape{2, 6}, Shape{0}}) {
      Tensor indices = random_tensor(ishape, DType::kI32, rng, 0, vocab - 1);
      Shape ushape = ishape;
      ushape.push_back(3);
      const Tensor updates = random_tensor(ushape, dtype, rng, -9, 9);
      // Shards of 3, 3 and 1 rows, and an empty one past the end (chunk semantics of 7 over 4).
      std::vector<Tensor> gathered, scattered;
      for (int64_t first : {0, 3, 6, 7}) {
        const int64_t rows = std::min<int64_t>(3, vocab - first);
        const Tensor shard =
            make({2}, DType::kI64, {static_cast<double>(first), static_cast<double>(rows)});
        const Tensor part = slice(table, {first, 0}, {rows, 3});
        gathered.push_back(gather_shard_rows(part, indices, shard, vocab));
        scattered.push_back(scatter_add_shard_rows(indices, updates, shard));
        CHECK(scattered.back().shape() == Shape({rows, 3}));
      }
      INFO(dtype_name(dtype) << " indices " << indices.to_string());
      // Every id is in exactly one shard: the masked rows add up to gather's, exactly.
      const auto want = values(gather(table, indices, 0));
      std::vector<double> sum(want.size(), 0.0);
      for (const Tensor& g : gathered) {
        const auto v = values(g);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
      }
      CHECK(sum == want);
      // The shards' sums put together are scatter_add's, bit for bit (each row in index order).
      CHECK(values(concat(scattered, 0)) == values(scatter_add({vocab, 3}, indices, updates, 0)));
    }
  }
  // chunk_rows: the chunks' sums (each a plain scatter) added in f64 in order, rounded once.
  for (DType dtype : {DType::kF32, DType::kF64}) {
    const Tensor indices = random_tensor({6, 5}, DType::kI32, rng, 0, vocab - 1);
    const Tensor updates = random_tensor({6, 5, 3}, dtype, rng, -9, 9);
    const Tensor shard = make({2}, DType::kI64, {3, 3});
    std::vector<double> want(9, 0.0);
    for (int64_t begin = 0; begin < 6; begin += 4) {
      const int64_t rows = std::min<int64_t>(6 - begin, 4);
      const auto part = values(scatter_add_shard_rows(
          slice(indices, {begin, 0}, {rows, 5}), slice(updates, {begin, 0, 0}, {rows, 5, 3}),
          shard));
      for (size_t i = 0; i < want.size(); ++i) want[i] += part[i];
    }
    for (double& w : want) w = dtype == DType::kF32 ? static_cast<float>(w) : w;
    CHECK(values(scatter_add_shard_rows(indices, updates, shard, 4)) == want);
  }
  const Tensor params = Tensor::zeros({2, 2}, DType::kF32);
  const Tensor shard = make({2}, DType::kI64, {4, 2});
  CHECK_THROWS_MATCHES(
      scatter_add_shard_rows(make({1}, DType::kI32, {5}), Tensor::zeros({1, 2}, DType::kBF16),
                             shard, 2),
      InvalidArgumentError,
      Catch::Message("[scatter_add] chunk_rows 2 must be >= 0, and 0 for bf16[1,2]"));
  CHECK_THROWS_MATCHES(gather_shard_rows(params, make({2}, DType::kI32, {1, 8}), shard, 8),
                       InvalidArgumentError,
                       Catch::Message("[gather] index 8 at position [1] is outside [0, 8)"));
  CHECK_THROWS_MATCHES(gather_shard_rows(params, make({1}, DType::kI32, {1}), shard, -1),
                       InvalidArgumentError, Catch::Message("[gather] vocab must be >= 0, got -1"));
  CHECK_THROWS_MATCHES(
      gather_shard_rows(params, make({1}, DType::kI32, {1}), make({1}, DType::kI64, {4}), 8),
      InvalidArgumentError,
      Catch::Message("[gather] shard must be i64 (first row, rows), got i64[1]"));
  CHECK_THROWS_MATCHES(
      scatter_add_shard_rows(make({2}, DType::kI32, {1, 5}), Tensor::zeros({3, 2}, DType::kF32),
                             shard),
      ShapeError,
      Catch::Message("[scatter_add] updates f32[3,2] should start with the shape of indices "
                     "i32[2]"));
  CHECK_THROWS_MATCHES(
      scatter_add_shard_rows(make({1}, DType::kI32, {5}), Tensor::zeros({1, 2}, DType::kF32),
                             make({2}, DType::kI32, {4, 2})),
      InvalidArgumentError,
      Catch::Message("[scatter_add] shard must be i64 (first row, rows), got i32[2]"));
}

TEST_CASE("gather and scatter_add are adjoint") {
  std::mt19937 rng(23);
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    for (const Shape& shape : {Shape{5}, Shape{4, 3}, Shape{2, 5, 3}, Shape{3, 0}}) {
      const int64_t rank = static_cast<int64_t>(shape.size());
      for (int64_t axis = -rank; axis < rank; ++axis) {
        const size_t ax = static_cast<size_t>(axis < 0 ? axis + rank : axis);
        if (shape[ax] == 0) continue;
        for (const Shape& ishape : {Shape{}, Shape{4}, Shape{2, 3}, Shape{0}}) {
          Tensor params = random_tensor(shape, dtype, rng, -9, 9);
          Tensor indices =
              random_tensor(ishape, DType::kI32, rng, 0, static_cast<double>(shape[ax] - 1));
          if (dtype == DType::kI64) indices = cast(indices, DType::kI64);
          Shape out_shape(shape.begin(), shape.begin() + static_cast<int64_t>(ax));
          out_shape.insert(out_shape.end(), ishape.begin(), ishape.end());
          out_shape.insert(out_shape.end(), shape.begin() + static_cast<int64_t>(ax) + 1,
                           shape.end());
          const auto vp = values(params), vi = values(indices);
          Tensor updates = random_tensor(out_shape, dtype, rng, -9, 9);
          const auto vu = values(updates);
          std::vector<double> want(static_cast<size_t>(num_elements(out_shape)));
          std::vector<double> scattered(vp.size(), 0.0);
          for (size_t i = 0; i < want.size(); ++i) {
            const auto oi = unravel(static_cast<int64_t>(i), out_shape);
            std::vector<int64_t> pi(oi.begin(), oi.begin() + static_cast<int64_t>(ax));
            const std::vector<int64_t> ii(oi.begin() + static_cast<int64_t>(ax),
                                          oi.begin() + static_cast<int64_t>(ax + ishape.size()));
            pi.push_back(static_cast<int64_t>(vi[static_cast<size_t>(ravel(ii, ishape))]));
            pi.insert(pi.end(), oi.begin() + static_cast<int64_t>(ax + ishape.size()), oi.end());
            const size_t src = static_cast<size_t>(ravel(pi, shape));
            want[i] = vp[src];
            scattered[src] += vu[i];
          }
          INFO(params.to_string() << " axis " << axis << " indices " << indices.to_string());
          check_values(gather(params, indices, axis), out_shape, dtype, want, 0);
          check_values(scatter_add(shape, indices, updates, axis), shape, dtype, scattered,
                       tolerance(dtype));
        }
      }
    }
  }
  Tensor params = Tensor::zeros({5, 2}, DType::kF32);
  CHECK_THROWS_MATCHES(gather(params, make({2}, DType::kI32, {1, 5}), 0), InvalidArgumentError,
                       Catch::Message("[gather] index 5 at position [1] is outside [0, 5)"));
  CHECK_THROWS_MATCHES(gather(params, make({1, 2}, DType::kI64, {0, -1}), 1), InvalidArgumentError,
                       Catch::Message("[gather] index -1 at position [0,1] is outside [0, 2)"));
  CHECK_THROWS_MATCHES(gather(params, Tensor::zeros({2}, DType::kF32), 0), DTypeError,
                       Catch::Message("[gather] indices must be i32 or i64, got f32[2]"));
  CHECK_THROWS_MATCHES(gather(params, Tensor::zeros({2}, DType::kI32), 2), InvalidArgumentError,
                       Catch::Message("[gather] axis 2 is out of range for f32[5,2]"));
  CHECK_THROWS_MATCHES(gather(Tensor::zeros({}, DType::kF32), Tensor::zeros({2}, DType::kI32), 0),
                       ShapeError,
                       Catch::Message("[gather] params must have rank >= 1, got f32[]"));
  CHECK_THROWS_MATCHES(
      scatter_add({5, 2}, Tensor::zeros({3}, DType::kI32), Tensor::zeros({3, 3}, DType::kF32), 0),
      ShapeError,
      Catch::Message("[scatter_add] updates f32[3,3] should have shape [3,2] for indices i32[3] "
                     "into [5,2] along axis 0"));
  CHECK_THROWS_MATCHES(
      scatter_add({5, 2}, make({1}, DType::kI32, {7}), Tensor::zeros({1, 2}, DType::kF32), 0),
      InvalidArgumentError,
      Catch::Message("[scatter_add] index 7 at position [0] is outside [0, 5)"));
  CHECK_THROWS_MATCHES(
      scatter_add({5}, Tensor::zeros({1}, DType::kI32), Tensor::zeros({1}, DType::kBool), 0),
      DTypeError, Catch::Message("[scatter_add] unsupported dtype bool: bool[1]"));
  CHECK_THROWS_MATCHES(
      scatter_add({5}, Tensor::zeros({1}, DType::kI32), Tensor::zeros({1}, DType::kF32), -2),
      InvalidArgumentError, Catch::Message("[scatter_add] axis -2 is out of range for [5]"));
  CHECK_THROWS_MATCHES(
      scatter_add({5}, Tensor::zeros({1}, DType::kF32), Tensor::zeros({1}, DType::kF32), 0),
      DTypeError, Catch::Message("[scatter_add] indices must be i32 or i64, got f32[1]"));
  CHECK_THROWS_MATCHES(
      scatter_add({}, Tensor::zeros({1}, DType::kI32), Tensor::zeros({1}, DType::kF32), 0),
      ShapeError, Catch::Message("[scatter_add] output shape must have rank >= 1, got []"));
  CHECK_THROWS_MATCHES(
      scatter_add({-5}, Tensor::zeros({1}, DType::kI32), Tensor::zeros({1}, DType::kF32), 0),
      ShapeError, Catch::Message("[scatter_add] negative dim in shape [-5]"));
  // Repeated indices accumulate.
  check_values(
      scatter_add({3}, make({3}, DType::kI64, {1, 1, 0}), make({3}, DType::kF32, {1, 2, 4}), 0),
      {3}, DType::kF32, {4, 3, 0}, 0);
}

TEST_CASE("outputs keep the input's device tag") {
  Tensor x = Tensor::zeros({2, 2}, DType::kF32, Device{DeviceType::kCPU, 3});
  CHECK(unary(UnaryOp::kExp, x).device() == x.device());
  CHECK(matmul(x, x).device() == x.device());
  CHECK(reduce(ReduceKind::kSum, x, {0}, false).device() == x.device());
  CHECK(transpose(x, {1, 0}).device() == x.device());
}
