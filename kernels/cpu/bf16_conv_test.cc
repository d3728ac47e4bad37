// bf16 convolutions (conv2d and its two gradients) on random bf16 values against the f64 direct
// loops, with stated tolerances. Each output sums K products of exact bf16 values (K = kh*kw*c/g
// forward, kh*kw*o/g for the input gradient, n*oh*ow for the filter gradient) in f32, each sum
// rounding by at most 2^-24 relative, so with f32_output
//   |got - exact| <= 2^-11 * sum |a * b|        (K <= 8192 here)
// and a bf16 result, rounded once more (2^-9 relative), within 2^-8 * sum |a * b|. The sums of
// |a * b| are the same convolutions of |a| and |b| in f64. Built twice, as bf16_kernels_test: as
// is (oneDNN's brgemm/AVX512_BF16 kernels, AMX where the CPU has it) and held to AVX2, where
// oneDNN has no bf16 convolution and the kernels run on f32 copies of the operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "kernels/checks.h"
#include "kernels/cpu/bf16_test_values.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/kernels.h"

using namespace dtensor;
using bf16_test::avx2_only;
using bf16_test::bf16_values;
using bf16_test::f64;
using kernels::Conv2dParams;
using kernels::cpu::internal::ConvPass;

namespace {

struct Case {
  const char* name;
  Shape x, w;
  Conv2dParams p;
};

Conv2dParams params(int64_t pad, int64_t stride, int64_t dilation, int64_t groups, int threads) {
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = pad;
  p.stride_h = p.stride_w = stride;
  p.dilation_h = p.dilation_w = dilation;
  p.groups = groups;
  p.threads = threads;
  return p;
}

// The CIFAR-10 CNN's two convolutions (SAME 5x5) and a strided, dilated, grouped one.
std::vector<Case> cases(int threads) {
  return {{"conv1", {4, 24, 24, 3}, {5, 5, 3, 64}, params(2, 1, 1, 1, threads)},
          {"conv2", {4, 12, 12, 64}, {5, 5, 64, 64}, params(2, 1, 1, 1, threads)},
          {"grouped", {3, 11, 9, 32}, {3, 3, 16, 48}, params(1, 2, 2, 2, threads)}};
}

Tensor abs64(const Tensor& t) { return kernels::unary(kernels::UnaryOp::kAbs, f64(t)); }

// got within `fraction` of `bound` (elementwise) of `exact`.
void require_within(const char* what, const Tensor& got, const Tensor& exact, const Tensor& bound,
                    double fraction) {
  REQUIRE(got.shape() == exact.shape());
  const Tensor g = f64(got);
  for (int64_t i = 0; i < exact.num_elements(); ++i) {
    const double want = exact.data<double>()[i];
    INFO(what << " element " << i << ": " << g.data<double>()[i] << " vs " << want);
    REQUIRE(std::abs(g.data<double>()[i] - want) <= fraction * bound.data<double>()[i]);
  }
}

}  // namespace

TEST_CASE("bf16 convolutions equal the f64 loops within 2^-8 (bf16) or 2^-11 (f32) of sum |a b|",
          "[bf16]") {
  for (int threads : {1, 2}) {
    for (const Case& c : cases(threads)) {
      const Tensor x = bf16_values(c.x, 1), w = bf16_values(c.w, 2);
      const kernels::ConvGeometry g = kernels::checks::conv_geometry("test", c.x, c.w, c.p);
      const Tensor dy = bf16_values({g.n, g.oh, g.ow, g.o}, 3);
      const Tensor y_exact = kernels::conv2d(f64(x), f64(w), c.p);
      const Tensor y_bound = kernels::conv2d(abs64(x), abs64(w), c.p);
      const Tensor dx_exact = kernels::conv2d_backprop_input(c.x, f64(w), f64(dy), c.p);
      const Tensor dx_bound = kernels::conv2d_backprop_input(c.x, abs64(w), abs64(dy), c.p);
      const Tensor dw_exact = kernels::conv2d_backprop_filter(f64(x), c.w, f64(dy), c.p);
      const Tensor dw_bound = kernels::conv2d_backprop_filter(abs64(x), c.w, abs64(dy), c.p);
      for (bool f32_output : {false, true}) {
        INFO(c.name << " threads=" << threads << " f32_output=" << f32_output
                    << (avx2_only ? " (AVX2)" : ""));
        Conv2dParams p = c.p;
        p.f32_output = f32_output;
        const DType out = f32_output ? DType::kF32 : DType::kBF16;
        const double fraction = f32_output ? 1.0 / 2048 : 1.0 / 256;
        const Tensor y = kernels::conv2d(x, w, p);
        CHECK(y.dtype() == out);
        require_within("y", y, y_exact, y_bound, fraction);
        const Tensor dx = kernels::conv2d_backprop_input(c.x, w, dy, p);
        CHECK(dx.dtype() == out);
        require_within("dx", dx, dx_exact, dx_bound, fraction);
        const Tensor dw = kernels::conv2d_backprop_filter(x, c.w, dy, p);
        CHECK(dw.dtype() == out);
        require_within("dw", dw, dw_exact, dw_bound, fraction);
      }
    }
  }
}

TEST_CASE("bf16 convolutions run on oneDNN's bf16 kernels where the CPU has them", "[bf16]") {
  const Case c = cases(2)[1];
  const kernels::ConvGeometry g = kernels::checks::conv_geometry("test", c.x, c.w, c.p);
  for (ConvPass pass : {ConvPass::kForward, ConvPass::kBackwardData, ConvPass::kBackwardWeights}) {
    const std::string impl =
        kernels::cpu::internal::onednn_conv_implementation(pass, DType::kBF16, DType::kF32, g, c.p);
    INFO("pass " << static_cast<int>(pass) << ": '" << impl << "'");
    if (avx2_only) {
      // No bf16 convolution below AVX-512: the kernels widen to f32 (tested above).
      CHECK(impl.empty());
    } else if (__builtin_cpu_supports("avx512bf16")) {
      CHECK((impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos));
    }
    SUCCEED("bf16 conv pass " << static_cast<int>(pass) << ": '" << impl << "'");
  }
}

TEST_CASE("f32_output convolutions reject operands that are not bf16", "[bf16]") {
  const Tensor x = Tensor::zeros({1, 4, 4, 2}, DType::kF32);
  const Tensor w = Tensor::zeros({3, 3, 2, 2}, DType::kF32);
  const Tensor dy = Tensor::zeros({1, 2, 2, 2}, DType::kF32);
  Conv2dParams p;
  p.f32_output = true;
  CHECK_THROWS_MATCHES(
      kernels::conv2d(x, w, p), DTypeError,
      Catch::Message("[conv2d] f32_output needs bf16 operands: f32[1,4,4,2] and f32[3,3,2,2]"));
  CHECK_THROWS_MATCHES(kernels::conv2d_backprop_input({1, 4, 4, 2}, w, dy, p), DTypeError,
                       Catch::Message("[conv2d_backprop_input] f32_output needs bf16 operands: "
                                      "f32[3,3,2,2] and f32[1,2,2,2]"));
  CHECK_THROWS_MATCHES(kernels::conv2d_backprop_filter(x, {3, 3, 2, 2}, dy, p), DTypeError,
                       Catch::Message("[conv2d_backprop_filter] f32_output needs bf16 operands: "
                                      "f32[1,4,4,2] and f32[1,2,2,2]"));
}

TEST_CASE("conv2d_bias adds the bias and applies ReLU as conv2d's epilogue", "[bf16]") {
  for (const Case& c : cases(2)) {
    const Tensor x = bf16_values(c.x, 4), w = bf16_values(c.w, 5);
    const Tensor bias16 = bf16_values({c.w[3]}, 6);
    const Tensor y_exact = kernels::conv2d(f64(x), f64(w), c.p);
    const Tensor y_bound = kernels::conv2d(abs64(x), abs64(w), c.p);
    // exact + bias and bound + |bias|, then the ReLU on the exact value (it moves no value
    // further from the result than the bound allows).
    const Tensor exact = kernels::unary(
        kernels::UnaryOp::kRelu, kernels::binary(kernels::BinaryOp::kAdd, y_exact, f64(bias16)));
    const Tensor bound = kernels::binary(kernels::BinaryOp::kAdd, y_bound, abs64(bias16));
    for (DType out : {DType::kBF16, DType::kF32}) {
      for (bool operands_f32 : {false, true}) {
        if (operands_f32 && out == DType::kBF16) continue;
        INFO(c.name << " out=" << dtype_name(out) << " operands=" << (operands_f32 ? "f32" : "bf16")
                    << (avx2_only ? " (AVX2)" : ""));
        Conv2dParams p = c.p;
        p.f32_output = out == DType::kF32 && !operands_f32;
        const Tensor xa = operands_f32 ? kernels::cast(x, DType::kF32) : x;
        const Tensor wa = operands_f32 ? kernels::cast(w, DType::kF32) : w;
        const Tensor bias = kernels::cast(bias16, out);
        const Tensor y = kernels::conv2d_bias(xa, wa, bias, kernels::UnaryOp::kRelu, p);
        CHECK(y.dtype() == out);
        require_within("relu(y + bias)", y, exact, bound,
                       out == DType::kF32 ? 1.0 / 2048 : 1.0 / 256);
        // No activation: the bias alone.
        const Tensor plain = kernels::conv2d_bias(xa, wa, bias, std::nullopt, p);
        require_within("y + bias", plain,
                       kernels::binary(kernels::BinaryOp::kAdd, y_exact, f64(bias16)), bound,
                       out == DType::kF32 ? 1.0 / 2048 : 1.0 / 256);
      }
    }
  }
}

TEST_CASE("conv2d_bias rejects a bias of the wrong shape or dtype", "[bf16]") {
  const Tensor x = Tensor::zeros({1, 4, 4, 2}, DType::kBF16);
  const Tensor w = Tensor::zeros({3, 3, 2, 5}, DType::kBF16);
  Conv2dParams p;
  p.f32_output = true;
  CHECK_THROWS_MATCHES(
      kernels::conv2d_bias(x, w, Tensor::zeros({5}, DType::kBF16), std::nullopt, p), DTypeError,
      Catch::Message("[conv2d_bias] bias bf16[5] must be f32[5] for the output "
                     "f32[1,2,2,5]"));
  CHECK_THROWS_MATCHES(kernels::conv2d_bias(x, w, Tensor::zeros({4}, DType::kF32), std::nullopt, p),
                       ShapeError,
                       Catch::Message("[conv2d_bias] bias f32[4] must be f32[5] for the output "
                                      "f32[1,2,2,5]"));
}
