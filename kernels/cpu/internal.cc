#include "kernels/cpu/internal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "runtime/vector_clones.h"

namespace dtensor::kernels::cpu::internal {

std::string position_to_string(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_to_string(index);
}

AxisView view_around_axis(const Shape& shape, int64_t axis) {
  AxisView view;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) view.outer *= shape[d];
    if (d == axis) view.n = shape[d];
    if (d > axis) view.inner *= shape[d];
  }
  return view;
}

Shape reduced_shape(const Shape& shape, int64_t axis, bool keepdims) {
  Shape out = shape;
  if (keepdims) {
    out[axis] = 1;
  } else {
    out.erase(out.begin() + axis);
  }
  return out;
}

// The two conversion loops, compiled for AVX-512 and AVX2 as well (runtime/vector_clones.h): the
// casts of a mixed_bfloat16 step ran at SSE2 width (5.6% of the captured seed step on the AMD
// EPYC host). Integer operations only, so every copy gives the same bits.
DTENSOR_VECTOR_CLONES void widen_bf16(const BFloat16* __restrict src, float* __restrict dst,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i].bits) << 16;
    std::memcpy(&dst[i], &u, sizeof(u));
  }
}

DTENSOR_VECTOR_CLONES void round_to_bf16(const float* __restrict src, BFloat16* __restrict dst,
                                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    // Same rounding as BFloat16(float), written branch-free so that the loop vectorizes.
    uint32_t u;
    std::memcpy(&u, &src[i], sizeof(u));
    uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
    bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    dst[i].bits =
        nan ? static_cast<uint16_t>((u >> 16) | 0x40u) : static_cast<uint16_t>(rounded >> 16);
  }
}

Tensor bf16_to_f32(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  widen_bf16(x.data<BFloat16>(), out.data<float>(), x.num_elements());
  return out;
}

Tensor f32_to_bf16(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), DType::kBF16, x.device());
  round_to_bf16(x.data<float>(), out.data<BFloat16>(), x.num_elements());
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t j = 0; j < from.size(); ++j) {
    int64_t t = to[to.size() - from.size() + j];
    if (from[j] != 1 && from[j] != t) return false;
  }
  return true;
}

}  // namespace dtensor::kernels::cpu::internal
