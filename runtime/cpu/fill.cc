// Constant fills in host memory: the CPU half of kernels::fill_value (runtime/element_loops.h).
#include <type_traits>

#include "runtime/element_loops.h"

namespace dtensor::kernels::cpu {

void fill_value(Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T v;
    if constexpr (std::is_same_v<T, BFloat16>) {
      v = BFloat16(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    T* data = static_cast<T*>(dst.raw_data());
    for (int64_t i = 0; i < dst.num_elements(); ++i) data[i] = v;
  });
}

}  // namespace dtensor::kernels::cpu
