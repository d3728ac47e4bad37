// Dtype conversion and scaling.
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/unary.h"
#include "runtime/elementwise_notes.h"

namespace dtensor::kernels::cpu {
namespace {

template <typename To, typename From>
void convert_all(const From* __restrict x, To* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = internal::convert<To>(x[i]);
}

template <typename T>
void scale_all(const T* __restrict x, T* __restrict y, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x.clone();
  // The common bf16 <-> f32 pair has dedicated vectorized loops, which a captured step's fused
  // segments also run (cast_into): a recorder tracing somewhere learns what this call was.
  if (cast_into_supported(x.dtype(), dtype)) {
    Tensor out = x.dtype() == DType::kBF16 ? internal::bf16_to_f32(x) : internal::f32_to_bf16(x);
    if (ElementwiseNotes::on()) {
      ElementwiseNotes::note({ElementwiseNote::Kind::kCast,
                              static_cast<int>(dtype),
                              x.dtype(),
                              {x.raw_data(), nullptr},
                              out.raw_data()});
    }
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  const int64_t n = x.num_elements();
  visit_dtype(x.dtype(), [&](auto from) {
    using From = decltype(from);
    visit_dtype(dtype, [&](auto to) {
      using To = decltype(to);
      convert_all<To, From>(x.data<From>(), out.data<To>(), n);
    });
  });
  return out;
}

bool cast_into_supported(DType from, DType to) {
  return (from == DType::kF32 && to == DType::kBF16) || (from == DType::kBF16 && to == DType::kF32);
}

void cast_into(DType from, DType to, const void* x, void* y, int64_t n) {
  DTENSOR_CHECK(cast_into_supported(from, to) && "cast_into pair was checked");
  if (from == DType::kF32) {
    internal::round_to_bf16(static_cast<const float*>(x), static_cast<BFloat16*>(y), n);
  } else {
    internal::widen_bf16(static_cast<const BFloat16*>(x), static_cast<float*>(y), n);
  }
}

Tensor scale(const Tensor& x, double alpha) {
  if (x.dtype() == DType::kBF16) {
    Tensor f = internal::bf16_to_f32(x);
    return internal::f32_to_bf16(scale(f, alpha));
  }
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>("scale", "needs a floating dtype, got {}", internal::describe(x));
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  internal::visit_float(x.dtype(), [&](auto t) {
    using T = decltype(t);
    scale_all<T>(x.data<T>(), out.data<T>(), x.num_elements(), static_cast<T>(alpha));
  });
  return out;
}

}  // namespace dtensor::kernels::cpu
