// The optimizers' fused updates in host memory: the CPU half of kernels/optimizer_update.h.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/thread_pool.h"
#include "runtime/vector_clones.h"

namespace dtensor::kernels::cpu {
namespace {

template <typename Fn>
void for_float(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::kF32)
    fn(float{});
  else
    fn(double{});
}

template <typename T>
struct AdamStep {
  T b1, b2, lr_t, eps, decay;
};

// Elements [begin, end) of the fused Adam update. The buffers are parameters, not captures: the
// compiler can then see they do not alias and vectorises the loop (sqrt and divide included).
template <typename T>
DTENSOR_VECTOR_CLONES void adam_range(const AdamStep<T> a, const T* __restrict w, const T* __restrict g,
                const T* __restrict m, const T* __restrict v, T* __restrict w_out,
                T* __restrict m_out, T* __restrict v_out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T mi = a.b1 * m[i] + (1 - a.b1) * g[i];
    const T vi = a.b2 * v[i] + (1 - a.b2) * g[i] * g[i];
    m_out[i] = mi;
    v_out[i] = vi;
    w_out[i] = w[i] * a.decay - a.lr_t * mi / (std::sqrt(vi) + a.eps);
  }
}

}  // namespace

void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    const T* w = var.data<T>();
    const T* g = grad.data<T>();
    T* out = var_out.data<T>();
    const int64_t n = var.num_elements();
    const T a = static_cast<T>(lr);
    for (int64_t i = 0; i < n; ++i) out[i] = w[i] - a * g[i];
  });
}

void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    const T* w = var.data<T>();
    const T* g = grad.data<T>();
    T* out = var_out.data<T>();
    const int64_t n = var.num_elements();
    const T a = static_cast<T>(lr);
    const T mu = static_cast<T>(momentum);
    const T* v = velocity.data<T>();
    T* v_out = velocity_out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      T vel = mu * v[i] - a * g[i];
      v_out[i] = vel;
      out[i] = nesterov ? w[i] + mu * vel - a * g[i] : w[i] + vel;
    }
  });
}

void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m_in, const Tensor& v_in,
                 Tensor& var_out, Tensor& m_out_t, Tensor& v_out_t, const AdamStepParams& p) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    AdamStep<T> a{static_cast<T>(p.beta1), static_cast<T>(p.beta2), static_cast<T>(p.lr_t),
                  static_cast<T>(p.epsilon), static_cast<T>(p.decay)};
    const T* w = var.data<T>();
    const T* g = grad.data<T>();
    const T* m = m_in.data<T>();
    const T* v = v_in.data<T>();
    T* w_out = var_out.data<T>();
    T* m_out = m_out_t.data<T>();
    T* v_out = v_out_t.data<T>();
    const int64_t n = var.num_elements();
    ThreadPool& pool = ThreadPool::global();
    if (n < (1 << 16) || ThreadPool::in_worker()) {
      adam_range(a, w, g, m, v, w_out, m_out, v_out, 0, n);
    } else {
      const int64_t parts = pool.num_threads();
      pool.parallel_for(parts, [&](int64_t part) {
        ShardRange r = chunk_range(n, parts, part);
        adam_range(a, w, g, m, v, w_out, m_out, v_out, r.offset, r.offset + r.size);
      });
    }
  });
}

}  // namespace dtensor::kernels::cpu
