#include "train/optim/in_place_update.h"

#include <cmath>

#include "runtime/shape.h"
#include "runtime/thread_pool.h"
#include "runtime/vector_clones.h"

namespace dtensor::optim_internal {
namespace {

// Calls fn(begin, end) over [0, n): inline below the kernels' split size, else in one part per
// pool thread.
template <typename Fn>
void over_parts(int64_t n, const Fn& fn) {
  ThreadPool& pool = ThreadPool::global();
  if (n < (1 << 16) || ThreadPool::in_worker()) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t parts = pool.num_threads();
  pool.parallel_for(parts, [&](int64_t part) {
    ShardRange r = chunk_range(n, parts, part);
    fn(r.offset, r.offset + r.size);
  });
}

template <typename Fn>
void for_float(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::kF32)
    fn(float{});
  else
    fn(double{});
}

// The loops take their buffers as parameters (element i is read before it is written; no
// restrict, since the outputs are the inputs).
template <typename T>
DTENSOR_VECTOR_CLONES void adam_range(T b1, T b2, T lr_t, T eps, T decay, T* w, const T* g, T* m, T* v, int64_t begin,
                int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T mi = b1 * m[i] + (1 - b1) * g[i];
    const T vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * decay - lr_t * mi / (std::sqrt(vi) + eps);
  }
}

}  // namespace

void sgd_in_place(Tensor& var, const Tensor& grad, double lr) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* w = var.data<T>();
    const T* g = grad.data<T>();
    const T a = static_cast<T>(lr);
    for (int64_t i = 0; i < var.num_elements(); ++i) w[i] = w[i] - a * g[i];
  });
}

void sgd_momentum_in_place(Tensor& var, const Tensor& grad, Tensor& velocity, double lr,
                           double momentum, bool nesterov) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* w = var.data<T>();
    const T* g = grad.data<T>();
    T* v = velocity.data<T>();
    const T a = static_cast<T>(lr);
    const T mu = static_cast<T>(momentum);
    for (int64_t i = 0; i < var.num_elements(); ++i) {
      T vel = mu * v[i] - a * g[i];
      v[i] = vel;
      w[i] = nesterov ? w[i] + mu * vel - a * g[i] : w[i] + vel;
    }
  });
}

void adam_in_place(Tensor& var, const Tensor& grad, Tensor& m, Tensor& v,
                   const kernels::AdamStepParams& p) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* pw = var.data<T>();
    const T* pg = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    over_parts(var.num_elements(), [&](int64_t begin, int64_t end) {
      adam_range<T>(static_cast<T>(p.beta1), static_cast<T>(p.beta2), static_cast<T>(p.lr_t),
                    static_cast<T>(p.epsilon), static_cast<T>(p.decay), pw, pg, pm, pv, begin, end);
    });
  });
}

}  // namespace dtensor::optim_internal
