// The GPU kernels against the CPU kernels on the same inputs: each case runs the front on host
// tensors and on their copies on a GPU device and compares (f32 to 1e-5 relative, f64 to 1e-12,
// bf16 to one bf16 ulp unless a case states more; copies, integer results and uniform Philox
// draws bit for bit). Skips with one line without a GPU (runtime/cuda/gpu_test_main.cc).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/philox.h"
#include "kernels/cuda/tf32.h"
#include "kernels/kernels.h"
#include "kernels/optimizer_update.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/transfer.h"
#include "runtime/element_loops.h"
#include "runtime/random.h"

using namespace dtensor;
using namespace dtensor::kernels;
using Catch::Message;

namespace {

const Device kGpu{DeviceType::kGPU, 0};

Tensor G(const Tensor& t, int64_t id = 0) {
  return cuda::to_device(t, Device{DeviceType::kGPU, id});
}
Tensor H(const Tensor& t) { return cuda::to_host(t); }

// Deterministic values in [lo, hi) (integers: [lo, hi) rounded down).
Tensor values(const Shape& shape, DType dtype, double lo = -2.0, double hi = 2.0,
              uint64_t seed = 1) {
  Tensor f = Tensor::empty(shape, DType::kF64);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < f.num_elements(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) * 0x1p-53;
    f.data<double>()[i] = lo + (hi - lo) * u;
  }
  if (is_integer(dtype)) {
    for (int64_t i = 0; i < f.num_elements(); ++i) {
      f.data<double>()[i] = std::floor(f.data<double>()[i]);
    }
  }
  return cast(f, dtype);
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-5;
    case DType::kF64:
      return 1e-12;
    case DType::kBF16:
      return 1.0 / 128;  // one bf16 ulp (8 mantissa bits)
    default:
      return 0.0;
  }
}

// gpu (a GPU tensor) matches cpu (a host tensor) within the dtype's tolerance; NaNs match NaNs.
void check_close(const Tensor& gpu, const Tensor& cpu, const std::string& what,
                 double scale_tol = 1.0) {
  INFO(what << ": " << cpu.to_string());
  REQUIRE(gpu.device().type == DeviceType::kGPU);
  const Tensor g = H(gpu);
  REQUIRE(g.shape() == cpu.shape());
  REQUIRE(g.dtype() == cpu.dtype());
  const double tol = tolerance(cpu.dtype()) * scale_tol;
  if (tol == 0.0) {
    CHECK(bitwise_equal(g, cpu));
    return;
  }
  const Tensor a = cast(g, DType::kF64), b = cast(cpu, DType::kF64);
  int bad = 0;
  for (int64_t i = 0; i < a.num_elements() && bad < 5; ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    const bool ok = (std::isnan(x) && std::isnan(y)) || x == y ||
                    std::abs(x - y) <= tol * std::max(1.0, std::abs(y));
    if (!ok) {
      ++bad;
      FAIL_CHECK("element " << i << ": GPU " << x << " vs CPU " << y);
    }
  }
}

// A bf16 matmul against the CPU's. Both accumulate in f32, but cuBLAS may split the contraction
// and add the split partials in bf16 (the output type), so an element where large products
// cancel can differ by more than an ulp of its own small value. The stated tolerance is therefore
// the dot product's error bound: |gpu - cpu| <= 2^-8 * (|a| x |b|) + 2^-8 * |cpu|, per element, with
// |a| x |b| computed in f64. It still fails on a wrong element (a wrong index or transpose
// misses by the size of the terms, |a| x |b| / sqrt(k) or more); seen on an H200: 0.045 off on
// elements of [128,784] x [784,700] where |a| x |b| is about 780.
// |gpu - cpu| <= rel * (bound + |cpu|) per element, bound (f64) the sum of the absolute terms.
void check_within_bound(const Tensor& gpu, const Tensor& cpu_in, const Tensor& bound, double rel) {
  const Tensor cpu = cast(cpu_in, DType::kF64);
  const Tensor g = cast(H(gpu), DType::kF64);
  REQUIRE(g.shape() == cpu.shape());
  REQUIRE(bound.shape() == cpu.shape());
  int bad = 0;
  for (int64_t i = 0; i < g.num_elements() && bad < 5; ++i) {
    const double x = g.data<double>()[i], y = cpu.data<double>()[i];
    const double tol = rel * (bound.data<double>()[i] + std::abs(y));
    if (!(std::abs(x - y) <= tol)) {
      ++bad;
      FAIL_CHECK("element " << i << ": GPU " << x << " vs CPU " << y << " (bound " << tol << ")");
    }
  }
}

void check_bf16_matmul_close(const Tensor& gpu, const Tensor& a, const Tensor& b,
                             const MatmulOptions& o) {
  const Tensor bound = matmul(unary(UnaryOp::kAbs, cast(a, DType::kF64)),
                              unary(UnaryOp::kAbs, cast(b, DType::kF64)), o);
  INFO("bf16 matmul " << shape_to_string(a.shape()) << " x " << shape_to_string(b.shape()));
  check_within_bound(gpu, matmul(a, b, o), bound, 0x1p-8);
}

const DType kFloats[] = {DType::kF32, DType::kF64, DType::kBF16};

}  // namespace

TEST_CASE("GPU unary ops match the CPU") {
  for (DType dt : kFloats) {
    for (UnaryOp op :
         {UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kExp, UnaryOp::kSquare, UnaryOp::kRelu,
          UnaryOp::kSigmoid, UnaryOp::kTanh, UnaryOp::kGelu, UnaryOp::kReluGrad, UnaryOp::kSign}) {
      Tensor x = values({4, 33}, dt);
      check_close(unary(op, G(x)), unary(op, x), std::string(unary_op_name(op)));
    }
    for (UnaryOp op : {UnaryOp::kLog, UnaryOp::kSqrt, UnaryOp::kRsqrt}) {
      Tensor x = values({4, 33}, dt, 0.01, 5.0);
      check_close(unary(op, G(x)), unary(op, x), std::string(unary_op_name(op)));
    }
  }
  for (DType dt : {DType::kI32, DType::kI64}) {
    for (UnaryOp op : {UnaryOp::kNeg, UnaryOp::kAbs, UnaryOp::kSquare, UnaryOp::kRelu,
                       UnaryOp::kReluGrad, UnaryOp::kSign}) {
      Tensor x = values({50}, dt, -100, 100);
      check_close(unary(op, G(x)), unary(op, x), std::string(unary_op_name(op)));
    }
  }
  CHECK_THROWS_MATCHES(unary(UnaryOp::kExp, G(values({2}, DType::kI32))), DTypeError,
                       Message("[exp] unsupported dtype i32: i32[2]"));
}

TEST_CASE("GPU binary ops broadcast like the CPU") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {3, 1}}, {{5}, {}}, {{1, 6}, {4, 1}}, {{0, 3}, {3}}};
  for (const auto& [sa, sb] : shapes) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
      Tensor a = values(sa, dt, -5, 5, 2), b = values(sb, dt, 1, 5, 3);
      for (BinaryOp op :
           {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv, BinaryOp::kMaximum,
            BinaryOp::kMinimum, BinaryOp::kEqual, BinaryOp::kNotEqual, BinaryOp::kLess,
            BinaryOp::kLessEqual, BinaryOp::kGreater, BinaryOp::kGreaterEqual}) {
        check_close(binary(op, G(a), G(b)), binary(op, a, b), std::string(binary_op_name(op)));
      }
      if (is_floating(dt)) {
        Tensor pa = values(sa, dt, 0.5, 3, 4);
        check_close(binary(BinaryOp::kPow, G(pa), G(b)), binary(BinaryOp::kPow, pa, b), "pow");
      }
    }
  }
  Tensor p = binary(BinaryOp::kLess, values({6}, DType::kF32), values({6}, DType::kF32, -2, 2, 9));
  Tensor q = binary(BinaryOp::kGreater, values({6}, DType::kF32), Tensor::zeros({}, DType::kF32));
  check_close(binary(BinaryOp::kLogicalAnd, G(p), G(q)), binary(BinaryOp::kLogicalAnd, p, q),
              "and");
  check_close(binary(BinaryOp::kLogicalOr, G(p), G(q)), binary(BinaryOp::kLogicalOr, p, q), "or");
}

TEST_CASE("GPU binary errors name the op and the operands") {
  CHECK_THROWS_MATCHES(
      binary(BinaryOp::kAdd, G(values({2, 3}, DType::kF32)), G(values({4}, DType::kF32))),
      ShapeError, Message("[add] incompatible shapes for broadcasting: [2,3] vs [4]"));
  CHECK_THROWS_MATCHES(
      binary(BinaryOp::kAdd, G(values({2}, DType::kF32)), G(values({2}, DType::kF64))), DTypeError,
      Message("[add] dtypes differ: f32[2] vs f64[2]"));
  Tensor zero = Tensor::zeros({2}, DType::kI32);
  CHECK_THROWS_MATCHES(binary(BinaryOp::kDiv, G(values({2}, DType::kI32)), G(zero)),
                       InvalidArgumentError,
                       Message("[div] integer division by zero: i32[2] / i32[2]"));
}

TEST_CASE("GPU scale, where, cast, broadcast_to and sum_to match the CPU") {
  for (DType dt : kFloats) {
    Tensor x = values({3, 7}, dt);
    check_close(scale(G(x), 0.3), scale(x, 0.3), "scale");
    Tensor c =
        binary(BinaryOp::kGreater, values({3, 1}, DType::kF32), Tensor::zeros({}, DType::kF32));
    Tensor y = values({7}, dt, -1, 1, 5);
    check_close(where(G(c), G(x), G(y)), where(c, x, y), "where");
    check_close(broadcast_to(G(y), {4, 7}), broadcast_to(y, {4, 7}), "broadcast_to");
    check_close(sum_to(G(x), {1, 7}), sum_to(x, {1, 7}), "sum_to");
    check_close(sum_to(G(x), {7}), sum_to(x, {7}), "sum_to");
    check_close(sum_to(G(x), {3, 1}), sum_to(x, {3, 1}), "sum_to");
  }
  const DType all[] = {DType::kF32, DType::kF64, DType::kBF16,
                       DType::kI32, DType::kI64, DType::kBool};
  for (DType from : all) {
    Tensor x = values({40}, from == DType::kBool ? DType::kF32 : from, -1e3, 1e3);
    if (from == DType::kBool) x = binary(BinaryOp::kGreater, x, Tensor::zeros({}, DType::kF32));
    for (DType to : all) {
      check_close(cast(G(x), to), cast(x, to), "cast to " + std::string(dtype_name(to)), 0.0);
    }
  }
  Tensor special = Tensor::empty({5}, DType::kF32);
  const float sv[] = {std::numeric_limits<float>::quiet_NaN(), 3e9f, -3e9f, -2.7f, 2.7f};
  for (int i = 0; i < 5; ++i) special.data<float>()[i] = sv[i];
  check_close(cast(G(special), DType::kI32), cast(special, DType::kI32), "saturating cast");
}

TEST_CASE("GPU matmul through cuBLAS matches the CPU (TF32 off)") {
  REQUIRE_FALSE(cuda_tf32_allowed());
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {7, 3}, false, false},        {{7, 5}, {7, 3}, true, false},
      {{5, 7}, {3, 7}, false, true},         {{7, 5}, {3, 7}, true, true},
      {{2, 5, 7}, {7, 3}, false, false},     {{2, 1, 5, 7}, {3, 7, 4}, false, false},
      {{0, 4}, {4, 3}, false, false},        {{3, 0}, {0, 2}, false, false},
      {{128, 784}, {784, 700}, false, false}};
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32}) {
      Tensor a = values(c.a, dt, -2, 2, 1), b = values(c.b, dt, -2, 2, 2);
      MatmulOptions o;
      o.transpose_a = c.ta;
      o.transpose_b = c.tb;
      if (dt == DType::kBF16) {
        check_bf16_matmul_close(matmul(G(a), G(b), o), a, b, o);
      } else {
        check_close(matmul(G(a), G(b), o), matmul(a, b, o), "matmul", 10);
      }
    }
  }
  Tensor a = values({6, 5}, DType::kF32), b = values({5, 4}, DType::kF32);
  Tensor out = values({6, 4}, DType::kF32, -1, 1, 7);
  Tensor gout = G(out);
  matmul_accumulate(G(a), G(b), gout);
  matmul_accumulate(a, b, out);
  check_close(gout, out, "matmul_accumulate");
  Tensor ab = cast(a, DType::kBF16), bb = cast(b, DType::kBF16);
  Tensor mixed = values({6, 4}, DType::kF32, -1, 1, 8);
  Tensor gmixed = G(mixed);
  matmul_accumulate(G(ab), G(bb), gmixed);
  matmul_accumulate(ab, bb, mixed);
  check_close(gmixed, mixed, "matmul_accumulate bf16 into f32");
  CHECK_THROWS_MATCHES(matmul(G(a), G(a)), ShapeError,
                       Message("[matmul] inner dims differ: f32[6,5] x f32[6,5]"));
}

TEST_CASE("GPU dense fuses bias and activation like the CPU") {
  for (DType dt : kFloats) {
    Tensor x = values({9, 6}, dt), w = values({6, 5}, dt, -1, 1, 3),
           bias = values({5}, dt, -1, 1, 4);
    for (std::optional<UnaryOp> act :
         {std::optional<UnaryOp>{}, std::optional<UnaryOp>{UnaryOp::kRelu},
          std::optional<UnaryOp>{UnaryOp::kGelu}}) {
      check_close(dense(G(x), G(w), nullptr, act), dense(x, w, nullptr, act), "dense", 10);
      Tensor gb = G(bias);
      check_close(dense(G(x), G(w), &gb, act), dense(x, w, &bias, act), "dense+bias", 10);
    }
  }
}

TEST_CASE("GPU reductions and argmax/argmin match the CPU") {
  const std::vector<std::vector<int64_t>> axes_list = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}};
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    Tensor x = values({3, 50, 7}, dt, -4, 4);
    for (ReduceKind k : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax, ReduceKind::kMin,
                         ReduceKind::kProd}) {
      for (const auto& axes : axes_list) {
        if (k == ReduceKind::kProd && axes.empty()) continue;  // overflows
        for (bool keep : {false, true}) {
          check_close(reduce(k, G(x), axes, keep), reduce(k, x, axes, keep),
                      std::string(reduce_kind_name(k)));
        }
      }
    }
    for (int64_t axis : {0, 1, 2}) {
      check_close(argmax(G(x), axis, false), argmax(x, axis, false), "argmax");
      check_close(argmin(G(x), axis, true), argmin(x, axis, true), "argmin");
    }
  }
  Tensor big = values({1 << 20}, DType::kF32);
  check_close(reduce(ReduceKind::kSum, G(big), {}, false), reduce(ReduceKind::kSum, big, {}, false),
              "sum of 2^20");
  Tensor e = Tensor::empty({0, 3}, DType::kF32);
  check_close(reduce(ReduceKind::kMean, G(e), {0}, false), reduce(ReduceKind::kMean, e, {0}, false),
              "empty mean");
  Tensor b =
      binary(BinaryOp::kGreater, values({4, 5}, DType::kF32), Tensor::zeros({}, DType::kF32));
  check_close(reduce(ReduceKind::kMax, G(b), {1}, false), reduce(ReduceKind::kMax, b, {1}, false),
              "any");
}

TEST_CASE("GPU softmax family matches the CPU, non-finite rows included") {
  for (DType dt : kFloats) {
    Tensor x = values({6, 10}, dt, -20, 20);
    for (int64_t axis : {0, 1, -1}) {
      check_close(softmax(G(x), axis), softmax(x, axis), "softmax");
      check_close(log_softmax(G(x), axis), log_softmax(x, axis), "log_softmax");
      check_close(logsumexp(G(x), axis, true), logsumexp(x, axis, true), "logsumexp");
    }
    check_close(softmax_shift(G(x)), softmax_shift(x), "softmax_shift");
  }
  Tensor s = values({4, 3}, DType::kF32);
  const float inf = std::numeric_limits<float>::infinity();
  s.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  s.data<float>()[3] = inf;
  s.data<float>()[6] = -inf;
  s.data<float>()[7] = -inf;
  s.data<float>()[8] = -inf;
  s.data<float>()[9] = -inf;
  check_close(softmax(G(s), 1), softmax(s, 1), "softmax non-finite");
  check_close(log_softmax(G(s), 1), log_softmax(s, 1), "log_softmax non-finite");
  check_close(logsumexp(G(s), 1, false), logsumexp(s, 1, false), "logsumexp non-finite");
  check_close(softmax_shift(G(s)), softmax_shift(s), "softmax_shift non-finite");
}

TEST_CASE("GPU cross-entropy, its gradient and one_hot match the CPU") {
  for (DType dt : kFloats) {
    for (DType lt : {DType::kI32, DType::kI64}) {
      Tensor logits = values({128, 10}, dt, -5, 5), labels = values({128}, lt, 0, 10);
      check_close(sparse_softmax_cross_entropy(G(logits), G(labels)),
                  sparse_softmax_cross_entropy(logits, labels), "xent");
      Tensor grad = values({128}, dt, 0, 1, 5);
      check_close(sparse_softmax_cross_entropy_grad(G(logits), G(labels), G(grad)),
                  sparse_softmax_cross_entropy_grad(logits, labels, grad), "xent grad");
      check_close(one_hot(G(labels), 12, dt, 0.9, 0.01), one_hot(labels, 12, dt, 0.9, 0.01),
                  "one_hot");
    }
  }
  Tensor labels = values({4}, DType::kI32, 0, 3);
  labels.data<int32_t>()[2] = 7;
  CHECK_THROWS_MATCHES(sparse_softmax_cross_entropy(G(values({4, 3}, DType::kF32)), G(labels)),
                       InvalidArgumentError,
                       Message("[sparse_softmax_cross_entropy] label 7 at position 2 is outside "
                               "[0, 3)"));
}

TEST_CASE("GPU layer_norm and its gradient match the CPU") {
  for (DType dt : kFloats) {
    Tensor x = values({12, 33}, dt, -3, 3), g = values({33}, dt, 0.5, 1.5, 2),
           b = values({33}, dt, -1, 1, 3);
    LayerNormResult want = layer_norm(x, g, b, 1e-5);
    LayerNormResult got = layer_norm(G(x), G(g), G(b), 1e-5);
    check_close(got.y, want.y, "y", 10);
    check_close(got.mean, want.mean, "mean", 10);
    check_close(got.rstd, want.rstd, "rstd", 10);
    Tensor dy = values({12, 33}, dt, -1, 1, 4);
    LayerNormGrad wg = layer_norm_grad(dy, x, g, want.mean, want.rstd);
    LayerNormGrad gg = layer_norm_grad(G(dy), G(x), G(g), got.mean, got.rstd);
    check_close(gg.dx, wg.dx, "dx", 100);
    check_close(gg.dgamma, wg.dgamma, "dgamma", 100);
    check_close(gg.dbeta, wg.dbeta, "dbeta", 100);
  }
}

TEST_CASE("GPU data movement is bit-exact") {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    Tensor x = values({3, 4, 5}, dt, -9, 9);
    check_close(transpose(G(x), {2, 0, 1}), transpose(x, {2, 0, 1}), "transpose", 0);
    Tensor y = values({3, 2, 5}, dt, -9, 9, 4);
    check_close(concat({G(x), G(y), G(x)}, 1), concat({x, y, x}, 1), "concat", 0);
    check_close(slice(G(x), {1, 0, 2}, {2, -1, 3}), slice(x, {1, 0, 2}, {2, -1, 3}), "slice", 0);
    check_close(pad(G(x), {{1, 0}, {0, 2}, {3, 1}}, 1.5), pad(x, {{1, 0}, {0, 2}, {3, 1}}, 1.5),
                "pad", 0);
    Tensor idx = values({2, 6}, DType::kI64, 0, 4, 5);
    check_close(gather(G(x), G(idx), 1), gather(x, idx, 1), "gather", 0);
    Tensor upd = values({3, 2, 6, 5}, dt, -3, 3, 6);
    check_close(scatter_add({3, 4, 5}, G(idx), G(upd), 1), scatter_add({3, 4, 5}, idx, upd, 1),
                "scatter_add", 1);
  }
  Tensor idx = values({3}, DType::kI32, 0, 3);
  idx.data<int32_t>()[1] = -1;
  CHECK_THROWS_MATCHES(gather(G(values({3, 2}, DType::kF32)), G(idx), 0), InvalidArgumentError,
                       Message("[gather] index -1 at position 1 is outside [0, 3)"));
}

TEST_CASE("GPU table-shard gather and scatter-add give the CPU's bits") {
  // Rows [3, 6) of a table of 7 (the second shard of 7 over 3), ids all over the table.
  Tensor shard = Tensor::empty({2}, DType::kI64);
  shard.data<int64_t>()[0] = 3;
  shard.data<int64_t>()[1] = 3;
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    Tensor rows = values({3, 5}, dt, -9, 9);
    Tensor idx = values({2, 6}, DType::kI64, 0, 6, 5);
    check_close(gather_shard_rows(G(rows), G(idx), G(shard), 7),
                gather_shard_rows(rows, idx, shard, 7), "gather_shard_rows", 0);
    Tensor upd = values({2, 6, 5}, dt, -3, 3, 6);
    check_close(scatter_add_shard_rows(G(idx), G(upd), G(shard)),
                scatter_add_shard_rows(idx, upd, shard), "scatter_add_shard_rows", 0);
  }
  Tensor idx = values({3}, DType::kI32, 0, 3);
  idx.data<int32_t>()[2] = 7;
  CHECK_THROWS_MATCHES(gather_shard_rows(G(values({3, 2}, DType::kF32)), G(idx), G(shard), 7),
                       InvalidArgumentError,
                       Message("[gather] index 7 at position 2 is outside [0, 7)"));
}

TEST_CASE("GPU block kernels: copy_box, reduce_range, pairwise reduce_tensors, fills") {
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kBool}) {
    Tensor src = values({6, 7}, dt == DType::kBool ? DType::kI32 : dt, -3, 3);
    if (dt == DType::kBool) src = cast(src, DType::kBool);
    Tensor dst = values({5, 9}, src.dtype(), -3, 3, 2);
    Tensor gdst = G(dst, 3);
    copy_box_elements(G(src, 3), {1, 2}, gdst, {2, 4}, {3, 4});
    copy_box_elements(src, {1, 2}, dst, {2, 4}, {3, 4});
    check_close(gdst, dst, "copy_box", 0);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<Tensor> in, gin;
      for (int i = 0; i < 7; ++i) {
        in.push_back(values({1000}, src.dtype() == DType::kBool ? DType::kI32 : src.dtype(), -3, 3,
                            static_cast<uint64_t>(10 + i)));
        if (dt == DType::kBool) in.back() = cast(in.back(), DType::kBool);
        if (dt == DType::kBool && op == ReduceOp::kSum) continue;
        gin.push_back(G(in.back(), i));
      }
      if (dt == DType::kBool && op == ReduceOp::kSum) continue;
      Tensor acc = Tensor::empty({1000}, in[0].dtype()),
             gacc = Tensor::empty({1000}, in[0].dtype(), kGpu);
      reduce_tensors_into(acc, in, op);
      reduce_tensors_into(gacc, gin, op);
      check_close(gacc, acc, "reduce_tensors", 0);  // the same pairwise order: the same bits
      Tensor d = in[0].clone(), gd = G(in[0]);
      reduce_range_elements(d, in[1], op, 100, 900);
      reduce_range_elements(gd, G(in[1]), op, 100, 900);
      check_close(gd, d, "reduce_range", 0);
    }
    Tensor f = Tensor::empty({33}, dt), gf = Tensor::empty({33}, dt, kGpu);
    fill_value(f, 2.5);
    fill_value(gf, 2.5);
    check_close(gf, f, "fill", 0);
  }
}

TEST_CASE("GPU Philox fills give the CPU's bits for uniform draws") {
  const Shape global{9, 13};
  const std::vector<int64_t> offset{2, 3};
  const Shape shard{5, 7};
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64}) {
    RandomSpec spec;
    spec.seed = 0x123456789abcull;
    spec.a = is_integer(dt) ? -50 : -0.25;
    spec.b = is_integer(dt) ? 70 : 0.75;
    Tensor c = Tensor::empty(shard, dt), g = Tensor::empty(shard, dt, kGpu);
    fill_random(c, global, offset, spec);
    fill_random(g, global, offset, spec);
    check_close(g, c, "uniform " + std::string(dtype_name(dt)), 0);
    if (!is_integer(dt)) {
      for (RandomDistribution d :
           {RandomDistribution::kNormal, RandomDistribution::kTruncatedNormal}) {
        spec.distribution = d;
        spec.a = 0.5;
        spec.b = 2.0;
        fill_random(c, global, offset, spec);
        fill_random(g, global, offset, spec);
        check_close(g, c, "normal", 10);
      }
    }
  }
  // The device Philox is the CPU's function.
  for (uint32_t i = 0; i < 100; ++i) {
    const auto want = philox4x32_10({i, i * 7, 1, i * i}, {0xdeadbeefu, i});
    const auto got = cuda_launch::philox4x32_10({{i, i * 7, 1, i * i}}, {{0xdeadbeefu, i}});
    for (int j = 0; j < 4; ++j) CHECK(got.v[j] == want[static_cast<size_t>(j)]);
  }
}

TEST_CASE("GPU fused optimizer updates match the CPU") {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor w = values({1000}, dt), g = values({1000}, dt, -1, 1, 2),
           m = values({1000}, dt, -1, 1, 3), v = values({1000}, dt, 0, 1, 4);
    Tensor w1 = Tensor::empty({1000}, dt), gw1 = Tensor::empty({1000}, dt, kGpu);
    sgd_update(w, g, w1, 0.1);
    sgd_update(G(w), G(g), gw1, 0.1);
    check_close(gw1, w1, "sgd");
    for (bool nesterov : {false, true}) {
      Tensor v1 = Tensor::empty({1000}, dt), gv1 = Tensor::empty({1000}, dt, kGpu);
      sgd_momentum_update(w, g, m, w1, v1, 0.1, 0.9, nesterov);
      sgd_momentum_update(G(w), G(g), G(m), gw1, gv1, 0.1, 0.9, nesterov);
      check_close(gw1, w1, "momentum");
      check_close(gv1, v1, "velocity");
    }
    Tensor m1 = Tensor::empty({1000}, dt), v1 = Tensor::empty({1000}, dt);
    Tensor gm1 = Tensor::empty({1000}, dt, kGpu), gv1 = Tensor::empty({1000}, dt, kGpu);
    const AdamStepParams p{0.9, 0.999, 0.001, 1e-7, 0.99};
    adam_update(w, g, m, v, w1, m1, v1, p);
    adam_update(G(w), G(g), G(m), G(v), gw1, gm1, gv1, p);
    check_close(gw1, w1, "adam w");
    check_close(gm1, m1, "adam m");
    check_close(gv1, v1, "adam v");
  }
}

TEST_CASE("a failed kernel launch throws CudaError naming the kernel and CUDA's message",
          "[host]") {
  // What checked_launch (checked_launch.cuh) calls when cudaGetLastError reports a launch failed.
  CHECK_THROWS_MATCHES(
      cuda_launch::launch_failed(cudaErrorInvalidConfiguration, "unary_kernel"), cuda::CudaError,
      Message("[unary_kernel] kernel launch failed: invalid configuration argument"));
  CHECK_THROWS_MATCHES(
      cuda_launch::launch_failed(cudaErrorNoKernelImageForDevice, "adam_kernel"), cuda::CudaError,
      Message("[adam_kernel] kernel launch failed: no kernel image is available for execution on "
              "the device"));
}

// ---- CNN kernels: conv2d (cuDNN for f32/bf16, direct kernels for f64), pooling, LRN ----------

namespace {

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
};

Conv2dParams conv_params(int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                         std::array<int64_t, 4> pads, int64_t groups = 1) {
  Conv2dParams p;
  p.stride_h = sh;
  p.stride_w = sw;
  p.dilation_h = dh;
  p.dilation_w = dw;
  p.pad_top = pads[0];
  p.pad_bottom = pads[1];
  p.pad_left = pads[2];
  p.pad_right = pads[3];
  p.groups = groups;
  return p;
}

// Strides, same/valid/explicit and asymmetric padding, dilation, groups, odd sizes.
std::vector<ConvCase> conv_cases() {
  return {
      {{2, 7, 9, 3}, {3, 3, 3, 4}, conv_params(1, 1, 1, 1, {1, 1, 1, 1})},     // same
      {{2, 8, 8, 4}, {3, 3, 4, 6}, conv_params(2, 2, 1, 1, {0, 1, 0, 1})},     // TF same, stride 2
      {{1, 9, 7, 6}, {2, 3, 3, 4}, conv_params(1, 1, 2, 1, {0, 0, 0, 0}, 2)},  // valid, dilated
      {{3, 5, 5, 2}, {5, 5, 2, 3}, conv_params(1, 1, 1, 1, {2, 2, 2, 2})},     // CIFAR's 5x5
      {{2, 6, 6, 4}, {3, 3, 1, 4}, conv_params(1, 1, 1, 1, {1, 1, 1, 1}, 4)},  // depthwise
      {{1, 10, 11, 3}, {4, 2, 3, 5}, conv_params(3, 2, 1, 2, {3, 0, 1, 2})},   // explicit
      {{4, 5, 5, 8}, {1, 1, 8, 16}, conv_params(1, 1, 1, 1, {0, 0, 0, 0})},    // 1x1
      {{2, 13, 4, 2}, {3, 2, 2, 3}, conv_params(2, 1, 2, 1, {2, 1, 0, 1})},    // odd, uneven
  };
}

// The convolutions' tolerance, per element, relative to the sum of the absolute values of its
// terms (check_within_bound; the bound is the same pass on |x|, |w|, |dy| in f64): f32 1e-5 (FMA
// math, no TF32: only the order of the sums differs), f64 1e-12, bf16 2^-8 (cuDNN multiplies the
// bf16 inputs exactly and sums in f32 as the CPU does, but may add split partials in bf16, as
// cuBLAS did in the matmul check above).
double conv_rel(DType dt) {
  return dt == DType::kBF16 ? 0x1p-8 : dt == DType::kF64 ? 1e-12 : 1e-5;
}
Tensor abs64(const Tensor& t) { return unary(UnaryOp::kAbs, cast(t, DType::kF64)); }

// The message of what fn throws ("" if nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GPU conv2d and its gradients match the CPU") {
  for (DType dt : kFloats) {
    uint64_t seed = 20;
    for (const ConvCase& c : conv_cases()) {
      INFO(dtype_name(dt) << " x [" << c.x[1] << "," << c.x[2] << "] w [" << c.w[0] << ","
                          << c.w[1] << "] groups " << c.p.groups);
      Tensor x = values(c.x, dt, -2, 2, ++seed), w = values(c.w, dt, -1, 1, ++seed);
      const Tensor y = conv2d(x, w, c.p);
      {
        INFO("conv2d");
        check_within_bound(conv2d(G(x), G(w), c.p), y, conv2d(abs64(x), abs64(w), c.p),
                           conv_rel(dt));
      }
      Tensor dy = values(y.shape(), dt, -1, 1, ++seed);
      {
        INFO("conv2d_backprop_input");
        check_within_bound(conv2d_backprop_input(c.x, G(w), G(dy), c.p),
                           conv2d_backprop_input(c.x, w, dy, c.p),
                           conv2d_backprop_input(c.x, abs64(w), abs64(dy), c.p), conv_rel(dt));
      }
      {
        INFO("conv2d_backprop_filter");
        check_within_bound(conv2d_backprop_filter(G(x), c.w, G(dy), c.p),
                           conv2d_backprop_filter(x, c.w, dy, c.p),
                           conv2d_backprop_filter(abs64(x), c.w, abs64(dy), c.p), conv_rel(dt));
      }
    }
  }
}

TEST_CASE("GPU conv2d: repeated geometries reuse the cached algorithm; empty batches") {
  const ConvCase c = conv_cases()[1];
  Tensor x = values(c.x, DType::kF32, -2, 2, 3), w = values(c.w, DType::kF32, -1, 1, 4);
  const Tensor want = conv2d(x, w, c.p), bound = conv2d(abs64(x), abs64(w), c.p);
  for (int i = 0; i < 3; ++i) check_within_bound(conv2d(G(x), G(w), c.p), want, bound, 1e-5);
  Shape empty_x = c.x;
  empty_x[0] = 0;
  Tensor y = conv2d(G(Tensor::empty(empty_x, DType::kF32)), G(w), c.p);
  CHECK(y.shape() == Shape{0, 4, 4, 6});
  Tensor dw = conv2d_backprop_filter(G(Tensor::empty(empty_x, DType::kF32)), c.w, y, c.p);
  check_close(dw, Tensor::zeros(c.w, DType::kF32), "dw of an empty batch");
}

TEST_CASE("GPU conv2d errors are the CPU's") {
  Tensor x = values({1, 5, 5, 3}, DType::kF32), w = values({3, 3, 2, 4}, DType::kF32);
  const std::string cpu = error_of([&] { conv2d(x, w, Conv2dParams{}); });
  CHECK_FALSE(cpu.empty());
  CHECK(error_of([&] { conv2d(G(x), G(w), Conv2dParams{}); }) == cpu);
}

namespace {

Pool2dParams pool_params(int64_t wh, int64_t ww, int64_t sh, int64_t sw,
                         std::array<int64_t, 4> pads) {
  Pool2dParams p;
  p.window_h = wh;
  p.window_w = ww;
  p.stride_h = sh;
  p.stride_w = sw;
  p.pad_top = pads[0];
  p.pad_bottom = pads[1];
  p.pad_left = pads[2];
  p.pad_right = pads[3];
  return p;
}

}  // namespace

TEST_CASE("GPU pooling and its gradients match the CPU, ties and NaN included") {
  const std::vector<std::pair<Shape, Pool2dParams>> cases = {
      {{2, 8, 8, 3}, pool_params(2, 2, 2, 2, {0, 0, 0, 0})},
      {{2, 7, 9, 4}, pool_params(3, 3, 2, 2, {1, 1, 1, 1})},
      {{1, 6, 5, 5}, pool_params(3, 2, 1, 2, {0, 2, 1, 0})},
      {{3, 5, 7, 2}, pool_params(3, 3, 1, 1, {1, 1, 1, 1})},
  };
  for (DType dt : kFloats) {
    for (const auto& [shape, p] : cases) {
      INFO(dtype_name(dt) << " window " << p.window_h << "x" << p.window_w << " x [" << shape[1]
                          << "," << shape[2] << "]");
      // Integers in [-3, 3): many tied maxima, to check that dy goes to the first of them.
      Tensor x = cast(values(shape, DType::kI32, -3, 3, 7), dt);
      if (dt != DType::kBF16) {
        Tensor xf = cast(x, DType::kF64);
        xf.data<double>()[5] = std::numeric_limits<double>::quiet_NaN();
        x = cast(xf, dt);
      }
      const Tensor y = max_pool2d(x, p);
      check_close(max_pool2d(G(x), p), y, "max_pool2d", 0);
      Tensor dy = values(y.shape(), dt, -1, 1, 8);
      check_close(max_pool2d_grad(G(x), G(dy), p), max_pool2d_grad(x, dy, p), "max_pool2d_grad");
      Tensor xs = values(shape, dt, -2, 2, 9);
      check_close(avg_pool2d(G(xs), p), avg_pool2d(xs, p), "avg_pool2d");
      check_close(avg_pool2d_grad(shape, G(dy), p), avg_pool2d_grad(shape, dy, p),
                  "avg_pool2d_grad");
    }
  }
}

TEST_CASE("GPU pooling errors are the CPU's") {
  Tensor x = values({1, 4, 4, 2}, DType::kF32);
  CHECK_THROWS_MATCHES(max_pool2d(G(x), pool_params(2, 2, 1, 1, {2, 0, 0, 0})),
                       InvalidArgumentError,
                       Message("[max_pool2d] window 2x2 and strides 1x1 must be >= 1, paddings "
                               "2,0,0,0 in [0, window)"));
  const Pool2dParams p = pool_params(2, 2, 2, 2, {0, 0, 0, 0});
  Tensor wrong_dy = values({1, 3, 2, 2}, DType::kF32);
  for (auto [gpu, cpu] :
       std::vector<std::pair<std::string, std::string>>{
           {error_of([&] { max_pool2d(G(values({4, 4}, DType::kF32)), p); }),
            error_of([&] { max_pool2d(values({4, 4}, DType::kF32), p); })},
           {error_of([&] { avg_pool2d(G(values({1, 1, 4, 2}, DType::kF32)), p); }),
            error_of([&] { avg_pool2d(values({1, 1, 4, 2}, DType::kF32), p); })},
           {error_of([&] { max_pool2d_grad(G(x), G(wrong_dy), p); }),
            error_of([&] { max_pool2d_grad(x, wrong_dy, p); })},
           {error_of([&] { avg_pool2d_grad({1, 4, 4, 2}, G(wrong_dy), p); }),
            error_of([&] { avg_pool2d_grad({1, 4, 4, 2}, wrong_dy, p); })},
           {error_of([&] { max_pool2d(G(values({1, 4, 4, 2}, DType::kI32)), p); }),
            error_of([&] { max_pool2d(values({1, 4, 4, 2}, DType::kI32), p); })},
       }) {
    CHECK_FALSE(cpu.empty());
    CHECK(gpu == cpu);
  }
}

TEST_CASE("GPU local response normalisation and its gradient match the CPU") {
  const std::vector<LrnParams> params = {
      {5, 1.0, 1.0, 0.5},        // TF's defaults
      {2, 2.0, 1e-4, 0.75},      // the CIFAR-10 tutorial's
      {1, 1.0, 0.5, 1.0},        // beta 1
      {3, 1.5, 0.1, 0.6},        // a general beta (pow)
      {20, 1.0, 0.01, 0.75},     // radius beyond the channels
  };
  for (DType dt : kFloats) {
    for (const LrnParams& p : params) {
      INFO(dtype_name(dt) << " radius " << p.depth_radius << " beta " << p.beta);
      Tensor x = values({2, 3, 4, 11}, dt, -2, 2, 11), dy = values({2, 3, 4, 11}, dt, -1, 1, 12);
      check_close(local_response_normalization(G(x), p), local_response_normalization(x, p),
                  "lrn", 2);
      check_close(local_response_normalization_grad(G(x), G(dy), p),
                  local_response_normalization_grad(x, dy, p), "lrn_grad", 4);
    }
  }
  Tensor x = values({2, 5}, DType::kF32);
  CHECK_THROWS_MATCHES(local_response_normalization(G(x), LrnParams{-1, 1.0, 1.0, 0.5}),
                       InvalidArgumentError,
                       Message("[local_response_normalization] depth_radius must be >= 0, got -1"));
  CHECK(error_of([&] { local_response_normalization_grad(G(x), G(values({5, 2}, DType::kF32)),
                                                         LrnParams{}); }) ==
        error_of([&] { local_response_normalization_grad(x, values({5, 2}, DType::kF32),
                                                         LrnParams{}); }));
}
