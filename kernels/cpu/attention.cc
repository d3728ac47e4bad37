// Fused attention softmax(q k^T * scale + mask) v and its gradient, blockwise over the keys with
// an online softmax (a running max and sum per query row, the partial output rescaled as the max
// grows): the largest score buffer is kQueryBlock x kKeyBlock, never [Tq, Tk]. The backward
// recomputes each row's log-sum-exp with the forward's loop, then the probabilities block by
// block. Batch rows are independent and each is computed the same way whatever else the call
// holds (fixed blocks, fixed summation order), so the bits of a row do not depend on how the batch
// is split over devices.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/checks.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/internal.h"
#include "runtime/thread_pool.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::exp_t;

constexpr int64_t kQueryBlock = 16, kKeyBlock = 64;

struct Dims {
  int64_t rows, tq, tk, d, dv;  // rows: the product of the batch dims
  bool causal;
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t r = q.rank();
  return {q.num_elements() / std::max<int64_t>(1, q.shape()[r - 2] * q.shape()[r - 1]),
          q.shape()[r - 2],
          k.shape()[r - 2],
          q.shape()[r - 1],
          v.shape()[r - 1],
          causal};
}

// One batch row's q, k, v and the scratch of one query block against one key block.
template <typename T>
struct Row {
  const Dims& n;
  const T *q, *k, *v;
  T scale;
  std::vector<T> kt = std::vector<T>(static_cast<size_t>(n.d * kKeyBlock));
  std::vector<T> s = std::vector<T>(static_cast<size_t>(kQueryBlock * kKeyBlock));

  // The keys query block [i0, i0 + rows) attends to: all, or up to its last row when causal.
  int64_t key_end(int64_t i0, int64_t rows) const { return n.causal ? i0 + rows : n.tk; }
  bool masked(int64_t i, int64_t j) const { return n.causal && j > i; }

  // s[r][c] = q[i0 + r] . k[j0 + c] * scale (masked entries are left as they come: callers skip
  // them).
  void scores(int64_t i0, int64_t rows, int64_t j0, int64_t cols) {
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t e = 0; e < n.d; ++e) kt[e * cols + c] = k[(j0 + c) * n.d + e];
    }
    for (int64_t r = 0; r < rows; ++r) {
      T* sr = &s[r * kKeyBlock];
      std::fill(sr, sr + cols, T(0));
      const T* qr = q + (i0 + r) * n.d;
      for (int64_t e = 0; e < n.d; ++e) {
        const T qe = qr[e];
        const T* ke = &kt[e * cols];
        for (int64_t c = 0; c < cols; ++c) sr[c] += qe * ke[c];
      }
      for (int64_t c = 0; c < cols; ++c) sr[c] *= scale;
    }
  }

  // The forward of query block [i0, i0 + rows): out rows (when given) and each row's
  // log-sum-exp (when given).
  void forward(int64_t i0, int64_t rows, T* out, T* lse) {
    T m[kQueryBlock], l[kQueryBlock];
    std::vector<T> acc(static_cast<size_t>(rows * n.dv), T(0));
    std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
    std::fill(l, l + rows, T(0));
    const int64_t end = key_end(i0, rows);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, end - j0);
      scores(i0, rows, j0, cols);
      for (int64_t r = 0; r < rows; ++r) {
        T* sr = &s[r * kKeyBlock];
        const int64_t live = n.causal ? std::clamp<int64_t>(i0 + r - j0 + 1, 0, cols) : cols;
        if (live == 0) continue;
        T top = m[r];
        for (int64_t c = 0; c < live; ++c) top = std::max(top, sr[c]);
        const T rescale = exp_t<T>(m[r] - top);
        for (int64_t c = 0; c < live; ++c) sr[c] = exp_t<T>(sr[c] - top);  // vectorizes
        T sum = 0;
        for (int64_t c = 0; c < live; ++c) sum += sr[c];
        l[r] = l[r] * rescale + sum;
        m[r] = top;
        if (out == nullptr) continue;
        T* ar = &acc[r * n.dv];
        for (int64_t e = 0; e < n.dv; ++e) ar[e] *= rescale;
        for (int64_t c = 0; c < live; ++c) {
          const T p = sr[c];
          const T* vc = v + (j0 + c) * n.dv;
          for (int64_t e = 0; e < n.dv; ++e) ar[e] += p * vc[e];
        }
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      if (lse != nullptr) lse[r] = m[r] + std::log(l[r]);
      if (out == nullptr) continue;
      const T inv = T(1) / l[r];
      for (int64_t e = 0; e < n.dv; ++e) out[(i0 + r) * n.dv + e] = acc[r * n.dv + e] * inv;
    }
  }
};

template <typename T>
void attention_typed(const Tensor& q, const Tensor& k, const Tensor& v, const Dims& n, Tensor& y) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n.d)));
  ThreadPool::global().parallel_for(n.rows, [&](int64_t b) {
    Row<T> row{n, q.data<T>() + b * n.tq * n.d, k.data<T>() + b * n.tk * n.d,
               v.data<T>() + b * n.tk * n.dv, scale};
    T* out = y.data<T>() + b * n.tq * n.dv;
    for (int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
      row.forward(i0, std::min(kQueryBlock, n.tq - i0), out, nullptr);
    }
  });
}

// dq, dk, dv of one batch row, packed as [dq (tq*d), dk (tk*d), dv (tk*dv)].
template <typename T>
void attention_grad_row(Row<T>& row, const T* dy, const T* y, T* packed) {
  const Dims& n = row.n;
  T* dq = packed;
  T* dk = packed + n.tq * n.d;
  T* dv = dk + n.tk * n.d;
  std::fill(packed, packed + n.tq * n.d + n.tk * (n.d + n.dv), T(0));
  std::vector<T> vt(static_cast<size_t>(n.dv * kKeyBlock));
  T lse[kQueryBlock], delta[kQueryBlock];
  for (int64_t i0 = 0; i0 < n.tq; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, n.tq - i0);
    row.forward(i0, rows, nullptr, lse);
    for (int64_t r = 0; r < rows; ++r) {
      T sum = 0;
      for (int64_t e = 0; e < n.dv; ++e) sum += dy[(i0 + r) * n.dv + e] * y[(i0 + r) * n.dv + e];
      delta[r] = sum;
    }
    const int64_t end = row.key_end(i0, rows);
    for (int64_t j0 = 0; j0 < end; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, end - j0);
      row.scores(i0, rows, j0, cols);
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t e = 0; e < n.dv; ++e) vt[e * cols + c] = row.v[(j0 + c) * n.dv + e];
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const int64_t live = n.causal ? std::clamp<int64_t>(i - j0 + 1, 0, cols) : cols;
        T* sr = &row.s[r * kKeyBlock];
        const T* dyr = dy + i * n.dv;
        T dp[kKeyBlock];
        std::fill(dp, dp + live, T(0));
        for (int64_t e = 0; e < n.dv; ++e) {
          const T g = dyr[e];
          const T* ve = &vt[e * cols];
          for (int64_t c = 0; c < live; ++c) dp[c] += g * ve[c];
        }
        const T shift = lse[r];
        for (int64_t c = 0; c < live; ++c) sr[c] = exp_t<T>(sr[c] - shift);  // P, vectorizes
        for (int64_t c = 0; c < live; ++c) {
          const T p = sr[c];
          T* dvc = dv + (j0 + c) * n.dv;
          for (int64_t e = 0; e < n.dv; ++e) dvc[e] += p * dyr[e];
        }
        const T d_r = delta[r];
        for (int64_t c = 0; c < live; ++c) sr[c] = sr[c] * (dp[c] - d_r) * row.scale;  // dS
        T* dqr = dq + i * n.d;
        const T* qr = row.q + i * n.d;
        for (int64_t c = 0; c < live; ++c) {
          const T ds = sr[c];
          const T* kc = row.k + (j0 + c) * n.d;
          T* dkc = dk + (j0 + c) * n.d;
          for (int64_t e = 0; e < n.d; ++e) dqr[e] += ds * kc[e];
          for (int64_t e = 0; e < n.d; ++e) dkc[e] += ds * qr[e];
        }
      }
    }
  }
}

template <typename T>
void attention_grad_typed(const Tensor& dy, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& y, const Dims& n, Tensor& packed) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(n.d)));
  const int64_t per_row = n.tq * n.d + n.tk * (n.d + n.dv);
  ThreadPool::global().parallel_for(n.rows, [&](int64_t b) {
    Row<T> row{n, q.data<T>() + b * n.tq * n.d, k.data<T>() + b * n.tk * n.d,
               v.data<T>() + b * n.tk * n.dv, scale};
    attention_grad_row(row, dy.data<T>() + b * n.tq * n.dv, y.data<T>() + b * n.tq * n.dv,
                       packed.data<T>() + b * per_row);
  });
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const Dims n = dims_of(q, k, v, causal);
  Shape out = q.shape();
  out.back() = n.dv;
  Tensor y = Tensor::empty(out, q.dtype());
  if (q.dtype() == DType::kF32) {
    attention_typed<float>(q, k, v, n, y);
  } else {
    attention_typed<double>(q, k, v, n, y);
  }
  return y;
}

Tensor attention_grad(const Tensor& dy, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& y, bool causal) {
  const Dims n = dims_of(q, k, v, causal);
  Shape out(q.shape().begin(), q.shape().end() - 2);
  out.push_back(n.tq * n.d + n.tk * (n.d + n.dv));
  Tensor packed = Tensor::empty(out, q.dtype());
  if (q.dtype() == DType::kF32) {
    attention_grad_typed<float>(dy, q, k, v, y, n, packed);
  } else {
    attention_grad_typed<double>(dy, q, k, v, y, n, packed);
  }
  return packed;
}

}  // namespace dtensor::kernels::cpu
