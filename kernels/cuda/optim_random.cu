// Fused optimizer updates and Philox fills.
//
// Philox: the counter layout, key schedule and draw functions are those of the CPU kernels
// (runtime/cpu/random.cc), evaluated per element from its global position, so a shard filled
// here holds the CPU's values. Uniform draws are bit-identical (the arithmetic is spelled with
// _rn intrinsics so nvcc cannot contract it into an FMA the CPU does not use); normal draws go
// through CUDA's log/cos/sqrt, which may differ from the C library's by an ulp.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/checked_launch.cuh"
#include "kernels/cuda/device_types.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/philox.h"

namespace dtensor::kernels::cuda_launch {
namespace {

template <typename T>
__global__ void sgd_kernel(const T* w, const T* g, T* out, int64_t n, T lr) {
  DTENSOR_FOR_EACH(i, n) { out[i] = w[i] - lr * g[i]; }
}

template <typename T>
__global__ void momentum_kernel(const T* w, const T* g, const T* v, T* w_out, T* v_out, int64_t n,
                                T lr, T mu, bool nesterov) {
  DTENSOR_FOR_EACH(i, n) {
    const T vel = mu * v[i] - lr * g[i];
    v_out[i] = vel;
    w_out[i] = nesterov ? w[i] + mu * vel - lr * g[i] : w[i] + vel;
  }
}

template <typename T>
__global__ void adam_kernel(const T* w, const T* g, const T* m, const T* v, T* w_out, T* m_out,
                            T* v_out, int64_t n, T b1, T b2, T lr_t, T eps, T decay) {
  DTENSOR_FOR_EACH(i, n) {
    const T mi = b1 * m[i] + (1 - b1) * g[i];
    const T vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m_out[i] = mi;
    v_out[i] = vi;
    w_out[i] = w[i] * decay - lr_t * mi / (sqrt(vi) + eps);
  }
}

constexpr uint32_t kElementStream = 0;
constexpr uint32_t kPackedStream = 1;

__device__ inline uint32_t lo32(uint64_t x) { return static_cast<uint32_t>(x); }
__device__ inline uint32_t hi32(uint64_t x) { return static_cast<uint32_t>(x >> 32); }
__device__ inline uint64_t join(uint32_t hi, uint32_t lo) { return (uint64_t{hi} << 32) | lo; }

__device__ inline PhiloxBlock element_draw(uint64_t g, uint32_t retry, const uint32_t* key) {
  return philox4x32_10({lo32(g), hi32(g), kElementStream, retry}, {key[0], key[1]});
}
__device__ inline uint32_t packed_word(uint64_t g, const uint32_t* key) {
  const PhiloxBlock w =
      philox4x32_10({lo32(g >> 2), hi32(g >> 2), kPackedStream, 0}, {key[0], key[1]});
  return w.v[g & 3];
}

__device__ inline float unit_f32(uint32_t w) { return static_cast<float>(w >> 8) * 0x1p-24f; }
__device__ inline float unit_f32_open(uint32_t w) {
  return static_cast<float>((w >> 8) + 1) * 0x1p-24f;
}
__device__ inline double unit_f64(uint32_t hi, uint32_t lo) {
  return static_cast<double>(join(hi, lo) >> 11) * 0x1p-53;
}
__device__ inline double unit_f64_open(uint32_t hi, uint32_t lo) {
  return static_cast<double>((join(hi, lo) >> 11) + 1) * 0x1p-53;
}

__device__ inline float standard_normal(const PhiloxBlock& w, float) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  return __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(unit_f32_open(w.v[0])))),
                   cosf(__fmul_rn(kTwoPi, unit_f32(w.v[1]))));
}
__device__ inline double standard_normal(const PhiloxBlock& w, double) {
  constexpr double kTwoPi = 6.28318530717958647692;
  return __dmul_rn(sqrt(__dmul_rn(-2.0, log(unit_f64_open(w.v[0], w.v[1])))),
                   cos(__dmul_rn(kTwoPi, unit_f64(w.v[2], w.v[3]))));
}

template <typename T>
__global__ void random_kernel(T* out, StridedIndex global, int64_t n, RandomParams p) {
  DTENSOR_FOR_EACH(i, n) {
    const uint64_t g = static_cast<uint64_t>(global.offset(i));
    if constexpr (std::is_same_v<T, int32_t>) {
      const uint32_t w = packed_word(g, p.key);
      out[i] = static_cast<int32_t>(p.ilo + static_cast<int64_t>((uint64_t{w} * p.irange) >> 32));
    } else if constexpr (std::is_same_v<T, int64_t>) {
      const PhiloxBlock w = element_draw(g, 0, p.key);
      const uint64_t r = join(w.v[0], w.v[1]);
      const uint64_t step = p.irange == 0 ? r : __umul64hi(r, p.irange);
      out[i] = static_cast<int64_t>(static_cast<uint64_t>(p.ilo) + step);
    } else if constexpr (std::is_same_v<T, double>) {
      if (p.kind == random_kind::kUniform) {
        const PhiloxBlock w = element_draw(g, 0, p.key);
        out[i] = fmin(__dadd_rn(p.p0, __dmul_rn(p.p1, unit_f64(w.v[0], w.v[1]))), p.p2);
      } else {
        double z;
        uint32_t retry = 0;
        do {
          z = standard_normal(element_draw(g, retry++, p.key), 0.0);
        } while (p.kind == random_kind::kTruncatedNormal && fabs(z) > 2.0);
        out[i] = __dadd_rn(p.p0, __dmul_rn(p.p1, z));
      }
    } else {  // float and bf16 compute in f32
      float v;
      if (p.kind == random_kind::kUniform) {
        const float lo = static_cast<float>(p.p0), scale = static_cast<float>(p.p1);
        v = fminf(__fadd_rn(lo, __fmul_rn(scale, unit_f32(packed_word(g, p.key)))),
                  static_cast<float>(p.p2));
      } else {
        float z;
        uint32_t retry = 0;
        do {
          z = standard_normal(element_draw(g, retry++, p.key), 0.0f);
        } while (p.kind == random_kind::kTruncatedNormal && fabsf(z) > 2.0f);
        v = __fadd_rn(static_cast<float>(p.p0), __fmul_rn(static_cast<float>(p.p1), z));
      }
      if constexpr (std::is_same_v<T, Bf16>) {
        out[i] = to_bf16(v);
      } else {
        out[i] = v;
      }
    }
  }
}

}  // namespace

void sgd(int dtype, const void* var, const void* grad, void* var_out, int64_t n, double lr,
         cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == kF64) {
    checked_launch("sgd_kernel", sgd_kernel<double>, blocks_for(n), kThreads, stream,
                   static_cast<const double*>(var), static_cast<const double*>(grad),
                   static_cast<double*>(var_out), n, lr);
  } else {
    checked_launch("sgd_kernel", sgd_kernel<float>, blocks_for(n), kThreads, stream,
                   static_cast<const float*>(var), static_cast<const float*>(grad),
                   static_cast<float*>(var_out), n, static_cast<float>(lr));
  }
}

void sgd_momentum(int dtype, const void* var, const void* grad, const void* vel, void* var_out,
                  void* vel_out, int64_t n, double lr, double momentum, bool nesterov,
                  cudaStream_t stream) {
  if (n == 0) return;
  visit_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, Bf16>) {
      checked_launch("momentum_kernel", momentum_kernel<T>, blocks_for(n), kThreads, stream,
                     static_cast<const T*>(var), static_cast<const T*>(grad),
                     static_cast<const T*>(vel), static_cast<T*>(var_out), static_cast<T*>(vel_out),
                     n, static_cast<T>(lr), static_cast<T>(momentum), nesterov);
    }
  });
}

void adam(int dtype, const void* var, const void* grad, const void* m, const void* v, void* var_out,
          void* m_out, void* v_out, int64_t n, double beta1, double beta2, double lr_t,
          double epsilon, double decay, cudaStream_t stream) {
  if (n == 0) return;
  visit_float(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, Bf16>) {
      checked_launch("adam_kernel", adam_kernel<T>, blocks_for(n), kThreads, stream,
                     static_cast<const T*>(var), static_cast<const T*>(grad),
                     static_cast<const T*>(m), static_cast<const T*>(v), static_cast<T*>(var_out),
                     static_cast<T*>(m_out), static_cast<T*>(v_out), n, static_cast<T>(beta1),
                     static_cast<T>(beta2), static_cast<T>(lr_t), static_cast<T>(epsilon),
                     static_cast<T>(decay));
    }
  });
}

void fill_random(int dtype, void* out, const StridedIndex& global_of_local, int64_t n,
                 const RandomParams& params, cudaStream_t stream) {
  if (n == 0) return;
  visit(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      checked_launch("random_kernel", random_kernel<T>, blocks_for(n), kThreads, stream,
                     static_cast<T*>(out), global_of_local, n, params);
    }
  });
}

}  // namespace dtensor::kernels::cuda_launch
