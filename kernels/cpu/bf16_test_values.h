// What the bf16 kernel tests share (bf16_kernels_test.cc, bf16_conv_test.cc): the AVX2 switch of
// the test's second build and random operands that are exact in bf16. Test-only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>

#include "kernels/kernels.h"

namespace dtensor::bf16_test {

#ifdef DTENSOR_TEST_AVX2
// Set during static initialisation, so before oneDNN reads its environment (on its first
// primitive): oneDNN then runs no AVX-512 kernel, as on an AVX2-only host.
inline const bool avx2_only = [] { return setenv("DNNL_MAX_CPU_ISA", "AVX2", 1) == 0; }();
#else
inline const bool avx2_only = false;
#endif

// Uniform values in [-1, 1) rounded to bf16.
inline Tensor bf16_values(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Tensor t = Tensor::empty(shape, DType::kF64);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<double>()[i] = u(rng);
  return kernels::cast(t, DType::kBF16);
}

inline Tensor f64(const Tensor& t) { return kernels::cast(t, DType::kF64); }

}  // namespace dtensor::bf16_test
