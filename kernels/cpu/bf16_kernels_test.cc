// bf16 matmul and dense on random bf16 values against an f64 reference, with a stated tolerance:
// operands exact in bf16, products summed in f32 (k terms, each sum rounding by at most 2^-24
// relative) and the result rounded once to bf16 (2^-9 relative), so
//   |got - exact| <= 2^-8 * sum_k |a_ik * b_kj|
// holds with room to spare. Built twice: as is (AVX512_BF16 or AMX kernels where the CPU has
// them) and with oneDNN held to AVX2 by its DNNL_MAX_CPU_ISA switch (DTENSOR_TEST_AVX2), the
// path of an AVX2-only host: oneDNN has no optimised bf16 kernel there, and the products run in
// f32 through OpenBLAS on the widened operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/cpu/bf16_test_values.h"
#include "kernels/cpu/matmul_onednn.h"
#include "kernels/kernels.h"

using namespace dtensor;
using bf16_test::avx2_only;
using bf16_test::bf16_values;
using bf16_test::f64;

namespace {

// got against a @ b (+ bias, relu) in f64, within 2^-8 * sum |a_ik b_kj| (+ |bias|) per element.
void require_within(const Tensor& got, const Tensor& a, const Tensor& b, const Tensor* bias,
                    bool relu) {
  const Tensor exact = kernels::matmul(f64(a), f64(b));
  const Tensor bound = kernels::matmul(kernels::unary(kernels::UnaryOp::kAbs, f64(a)),
                                       kernels::unary(kernels::UnaryOp::kAbs, f64(b)));
  const Tensor g = f64(got);
  const int64_t n = exact.dim(1);
  const Tensor bias64 = bias != nullptr ? f64(*bias) : Tensor();
  for (int64_t i = 0; i < exact.num_elements(); ++i) {
    double want = exact.data<double>()[i];
    double tolerance = bound.data<double>()[i];
    if (bias != nullptr) {
      want += bias64.data<double>()[i % n];
      tolerance += std::abs(bias64.data<double>()[i % n]);
    }
    if (relu) want = std::max(want, 0.0);
    INFO("element " << i << ": " << g.data<double>()[i] << " vs " << want);
    REQUIRE(std::abs(g.data<double>()[i] - want) <= tolerance / 256);
  }
}

}  // namespace

TEST_CASE("oneDNN's bf16 kernel is the one this CPU allows", "[bf16]") {
  const kernels::cpu::onednn::GemmShape shape{64, 256, 512, false, false, DType::kBF16};
  const std::string impl = kernels::cpu::onednn::implementation(shape, {});
  INFO("bf16 gemm: '" << impl << "'");
  if (avx2_only) {
    // No AVX-512 kernel may run: none is optimised for bf16 on AVX2, so "" (OpenBLAS).
    CHECK(impl.find("avx512") == std::string::npos);
    CHECK(impl.find("amx") == std::string::npos);
  }
  SUCCEED("bf16 gemm implementation: '" << impl << "'");
}

TEST_CASE("bf16 matmul and dense equal the f64 reference within 2^-8 of sum |a b|", "[bf16]") {
  for (int threads : {1, 2}) {
    for (int64_t m : {1, 8, 67}) {
      INFO("m=" << m << " threads=" << threads << (avx2_only ? " (AVX2)" : ""));
      const Tensor a = bf16_values({m, 300}, 1), b = bf16_values({300, 129}, 2);
      const Tensor bias = bf16_values({129}, 3);
      const kernels::MatmulOptions o{false, false, threads};
      const Tensor y = kernels::matmul(a, b, o);
      CHECK(y.dtype() == DType::kBF16);
      require_within(y, a, b, nullptr, false);
      const Tensor d = kernels::dense(a, b, &bias, kernels::UnaryOp::kRelu, o);
      CHECK(d.dtype() == DType::kBF16);
      require_within(d, a, b, &bias, true);
      // bf16 operands accumulated into f32 (no rounding of the result to bf16).
      Tensor acc = Tensor::zeros({m, 129}, DType::kF32);
      kernels::matmul_accumulate(a, b, acc, o);
      require_within(acc, a, b, nullptr, false);
    }
  }
}

TEST_CASE("bf16 products with f32_output return the f32 accumulator that bf16 output rounds",
          "[bf16]") {
  for (int threads : {1, 2}) {
    for (bool ta : {false, true}) {
      INFO("threads=" << threads << " transpose_a=" << ta << (avx2_only ? " (AVX2)" : ""));
      const Tensor a = bf16_values({67, 300}, 4), b = bf16_values({300, 129}, 5);
      const Tensor at = kernels::transpose(a, {1, 0});
      const Tensor& lhs = ta ? at : a;
      const Tensor bias16 = bf16_values({129}, 6);
      const Tensor bias32 = kernels::cast(bias16, DType::kF32);
      kernels::MatmulOptions o{ta, false, threads};
      kernels::MatmulOptions o32 = o;
      o32.f32_output = true;
      const Tensor y = kernels::matmul(lhs, b, o32);
      REQUIRE(y.dtype() == DType::kF32);
      require_within(y, a, b, nullptr, false);
      // The bf16 result is this accumulator rounded once.
      const Tensor y16 = kernels::cast(y, DType::kBF16);
      CHECK(std::memcmp(y16.raw_data(), kernels::matmul(lhs, b, o).raw_data(), y16.nbytes()) == 0);
      const Tensor d = kernels::dense(lhs, b, &bias32, kernels::UnaryOp::kRelu, o32);
      REQUIRE(d.dtype() == DType::kF32);
      require_within(d, a, b, &bias16, true);
    }
  }
}

TEST_CASE("f32_output rejects non-bf16 operands and a bias not in the output dtype", "[bf16]") {
  const Tensor a = Tensor::zeros({2, 3}, DType::kF32), b = Tensor::zeros({3, 4}, DType::kF32);
  kernels::MatmulOptions o;
  o.f32_output = true;
  CHECK_THROWS_WITH(kernels::matmul(a, b, o),
                    "[matmul] f32_output needs bf16 operands: f32[2,3] x f32[3,4]");
  const Tensor a16 = kernels::cast(a, DType::kBF16), b16 = kernels::cast(b, DType::kBF16);
  const Tensor bias16 = Tensor::zeros({4}, DType::kBF16);
  CHECK_THROWS_WITH(kernels::dense(a16, b16, &bias16, std::nullopt, o),
                    "[dense] bias bf16[4] does not match output f32[2,4]");
}
