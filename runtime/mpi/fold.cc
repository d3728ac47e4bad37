#include "runtime/mpi/fold.h"

#include "runtime/error.h"

namespace dtensor {
namespace {

template <typename T>
T identity_of(ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMin;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(identity_of<float>(op));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::kSum) return T(-0.0);
    return op == ReduceOp::kMax ? -std::numeric_limits<T>::infinity()
                                : std::numeric_limits<T>::infinity();
  } else {
    if (op == ReduceOp::kSum) return T(0);
    return op == ReduceOp::kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

}  // namespace

void fold_into(Tensor& acc, const Tensor& next, ReduceOp op) {
  DTENSOR_CHECK(acc.dtype() == next.dtype() && acc.num_elements() == next.num_elements());
  const size_t n = static_cast<size_t>(acc.num_elements());
  visit_dtype(acc.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* a = acc.data<T>();
    const T* b = next.data<T>();
    if constexpr (std::is_same_v<T, BFloat16>) {
      for (size_t i = 0; i < n; ++i) {
        a[i] = BFloat16(combine(static_cast<float>(a[i]), static_cast<float>(b[i]), op));
      }
    } else {
      for (size_t i = 0; i < n; ++i) a[i] = combine(a[i], b[i], op);
    }
  });
}

Tensor identity_like(const Tensor& like, ReduceOp op) {
  Tensor out = Tensor::empty(like.shape(), like.dtype(), like.device());
  const size_t n = static_cast<size_t>(out.num_elements());
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T value = identity_of<T>(op);
    T* p = out.data<T>();
    for (size_t i = 0; i < n; ++i) p[i] = value;
  });
  return out;
}

}  // namespace dtensor
