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

// Where element i's new value goes besides the variable: the bf16 copy of an f32 variable, or
// nowhere (Copy = NoCopy, which the compiler drops).
struct NoCopy {
  template <typename T>
  void operator()(int64_t, T) const {}
};
struct Bf16Copy {
  BFloat16* out;
  void operator()(int64_t i, float w) const { out[i] = BFloat16(w); }
  void operator()(int64_t, double) const {}
};

// Calls fn(copy) with the copy writer `bf16_copy` asks for.
template <typename Fn>
void with_copy(Tensor* bf16_copy, const Fn& fn) {
  if (bf16_copy != nullptr) {
    fn(Bf16Copy{bf16_copy->data<BFloat16>()});
  } else {
    fn(NoCopy{});
  }
}

// The loops take their buffers as parameters (element i is read before it is written; no
// restrict, since the outputs are the inputs).
template <typename T, typename Copy>
DTENSOR_VECTOR_CLONES void sgd_range(T lr, T* w, const T* g, Copy copy, int64_t begin,
                                     int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    w[i] = w[i] - lr * g[i];
    copy(i, w[i]);
  }
}

template <typename T, typename Copy>
DTENSOR_VECTOR_CLONES void momentum_range(T lr, T mu, bool nesterov, T* w, const T* g, T* v,
                                          Copy copy, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T vel = mu * v[i] - lr * g[i];
    v[i] = vel;
    w[i] = nesterov ? w[i] + mu * vel - lr * g[i] : w[i] + vel;
    copy(i, w[i]);
  }
}

template <typename T, typename Copy>
DTENSOR_VECTOR_CLONES void adam_range(T b1, T b2, T lr_t, T eps, T decay, T* w, const T* g, T* m,
                                      T* v, Copy copy, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T mi = b1 * m[i] + (1 - b1) * g[i];
    const T vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    const T wi = w[i] * decay - lr_t * mi / (std::sqrt(vi) + eps);
    w[i] = wi;
    copy(i, wi);
  }
}

}  // namespace

void sgd_in_place(Tensor& var, const Tensor& grad, double lr, Tensor* bf16_copy) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* w = var.data<T>();
    const T* g = grad.data<T>();
    const T a = static_cast<T>(lr);
    with_copy(bf16_copy, [&](auto copy) {
      over_parts(var.num_elements(),
                 [&](int64_t begin, int64_t end) { sgd_range<T>(a, w, g, copy, begin, end); });
    });
  });
}

void sgd_momentum_in_place(Tensor& var, const Tensor& grad, Tensor& velocity, double lr,
                           double momentum, bool nesterov, Tensor* bf16_copy) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* w = var.data<T>();
    const T* g = grad.data<T>();
    T* v = velocity.data<T>();
    const T a = static_cast<T>(lr);
    const T mu = static_cast<T>(momentum);
    with_copy(bf16_copy, [&](auto copy) {
      over_parts(var.num_elements(), [&](int64_t begin, int64_t end) {
        momentum_range<T>(a, mu, nesterov, w, g, v, copy, begin, end);
      });
    });
  });
}

void adam_in_place(Tensor& var, const Tensor& grad, Tensor& m, Tensor& v,
                   const kernels::AdamStepParams& p, Tensor* bf16_copy) {
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    T* pw = var.data<T>();
    const T* pg = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    with_copy(bf16_copy, [&](auto copy) {
      over_parts(var.num_elements(), [&](int64_t begin, int64_t end) {
        adam_range<T>(static_cast<T>(p.beta1), static_cast<T>(p.beta2), static_cast<T>(p.lr_t),
                      static_cast<T>(p.epsilon), static_cast<T>(p.decay), pw, pg, pm, pv, copy,
                      begin, end);
      });
    });
  });
}

}  // namespace dtensor::optim_internal
