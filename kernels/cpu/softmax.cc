// softmax, log_softmax, logsumexp, sparse softmax cross-entropy and one_hot.
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::AxisView;
using internal::describe;

// The shift subtracted before exponentiating, from the max m of a row (the rule softmax_shift
// states): m when finite, so every exp is <= 1; the largest finite value when m is +inf, so finite
// elements keep exp <= 1 (none overflows to inf and then gives inf * 0 = NaN) while +inf ones
// stay +inf; 0 when m is -inf (every exp is 0) or NaN (the NaN element carries it through).
template <typename T>
T shift_for_max(T m) {
  if (std::isfinite(m)) return m;
  return m > 0 ? std::numeric_limits<T>::max() : T{0};
}

// Per (outer, inner) position along the axis of `v`: shift (from the max, see shift_for_max) and
// sum = sum(exp(x - shift)) in f64. When `exps` is not
// null it receives exp(x - shift) for every element. Rows of I elements are processed together,
// so every loop runs along contiguous memory.
template <typename T>
void exp_stats(const T* x, const AxisView& v, std::vector<T>& shift, std::vector<double>& sum,
               T* exps) {
  const int64_t R = v.n, I = v.inner;
  shift.assign(static_cast<size_t>(v.outer * I), -std::numeric_limits<T>::infinity());
  sum.assign(shift.size(), 0.0);
  std::vector<T> scratch(exps ? 0 : static_cast<size_t>(I));
  for (int64_t o = 0; o < v.outer; ++o) {
    const T* block = x + o * R * I;
    T* __restrict m = shift.data() + o * I;
    double* __restrict s = sum.data() + o * I;
    for (int64_t r = 0; r < R; ++r) {
      const T* __restrict row = block + r * I;
      for (int64_t i = 0; i < I; ++i) m[i] = internal::max_nan(m[i], row[i]);
    }
    for (int64_t i = 0; i < I; ++i) m[i] = shift_for_max(m[i]);
    for (int64_t r = 0; r < R; ++r) {
      const T* __restrict row = block + r * I;
      T* __restrict e = exps ? exps + (o * R + r) * I : scratch.data();
      for (int64_t i = 0; i < I; ++i) e[i] = internal::exp_t(row[i] - m[i]);
      for (int64_t i = 0; i < I; ++i) s[i] += static_cast<double>(e[i]);
    }
  }
}

// Contiguous rows (I == 1): the max and the sum are lane reductions along the row.
template <typename T>
void exp_stats_rows(const T* x, int64_t rows, int64_t n, std::vector<T>& shift,
                    std::vector<double>& sum, T* exps) {
  shift.resize(static_cast<size_t>(rows));
  sum.resize(static_cast<size_t>(rows));
  std::vector<T> scratch(exps ? 0 : static_cast<size_t>(n));
  for (int64_t o = 0; o < rows; ++o) {
    const T* __restrict row = x + o * n;
    T m = internal::reduce_lanes(
        row, n, -std::numeric_limits<T>::infinity(),
        [](T a, T b) { return internal::max_nan(a, b); }, [](T v) { return v; });
    m = shift_for_max(m);
    T* __restrict e = exps ? exps + o * n : scratch.data();
    for (int64_t r = 0; r < n; ++r) e[r] = internal::exp_t(row[r] - m);
    shift[static_cast<size_t>(o)] = m;
    sum[static_cast<size_t>(o)] = internal::sum_f64(e, n);
  }
}

template <typename T>
void stats(const T* x, const AxisView& v, std::vector<T>& shift, std::vector<double>& sum,
           T* exps) {
  if (v.inner == 1) {
    exp_stats_rows(x, v.outer, v.n, shift, sum, exps);
  } else {
    exp_stats(x, v, shift, sum, exps);
  }
}

enum class Kind { kSoftmax, kLogSoftmax };

// One contiguous run of the output: softmax scales the exps already in `out` by f (1/sum),
// log_softmax writes (in - shift) - f (f = log(sum)): subtracting the shift first keeps the
// precision of the result where x and the shift are large and close (x = 1e6 has an ulp of
// 0.0625; x - (shift + log(sum)) would round to it). S is 1 when every element has its own
// factor, 0 when the run shares one.
template <int64_t S, typename T>
void finish_run(Kind kind, const T* __restrict in, T* __restrict out, const T* __restrict shift,
                const T* __restrict f, int64_t n) {
  if (kind == Kind::kSoftmax) {
    for (int64_t j = 0; j < n; ++j) out[j] *= f[j * S];
  } else {
    for (int64_t j = 0; j < n; ++j) out[j] = (in[j] - shift[j * S]) - f[j * S];
  }
}

template <typename T>
void softmax_typed(Kind kind, const Tensor& x, Tensor& y, const AxisView& v) {
  std::vector<T> shift;
  std::vector<double> sum;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  stats<T>(px, v, shift, sum, kind == Kind::kSoftmax ? py : nullptr);
  std::vector<T> factor(shift.size());  // per (outer, inner) position
  for (size_t i = 0; i < factor.size(); ++i) {
    factor[i] =
        kind == Kind::kSoftmax ? static_cast<T>(1.0 / sum[i]) : static_cast<T>(std::log(sum[i]));
  }
  const int64_t I = v.inner;
  for (int64_t o = 0; o < v.outer; ++o) {
    const int64_t base = o * v.n * I;
    if (I == 1) {  // the whole row shares one factor
      finish_run<0>(kind, px + base, py + base, shift.data() + o, factor.data() + o, v.n);
      continue;
    }
    for (int64_t r = 0; r < v.n; ++r) {
      finish_run<1>(kind, px + base + r * I, py + base + r * I, shift.data() + o * I,
                    factor.data() + o * I, I);
    }
  }
}

Tensor softmax_op(const char* op, Kind kind, const Tensor& x, int64_t axis) {
  if (!is_floating(x.dtype())) internal::throw_unsupported(op, x);
  const int64_t ax = internal::normalize_axis(op, axis, x);
  if (x.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(softmax_op(op, kind, internal::bf16_to_f32(x), axis));
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const AxisView v = internal::view_around_axis(x.shape(), ax);
  internal::visit_float(x.dtype(), [&](auto tag) { softmax_typed<decltype(tag)>(kind, x, y, v); });
  return y;
}

// Checks logits [..., C] against labels [...] and every label against [0, C).
// The label values (data); the front checked the arguments (checks::cross_entropy).
void check_label_values(const char* op, const Tensor& logits, const Tensor& labels) {
  const int64_t classes = logits.shape().back();
  visit_dtype(labels.dtype(), [&](auto tag) {
    using L = decltype(tag);
    if constexpr (std::is_same_v<L, int32_t> || std::is_same_v<L, int64_t>) {
      const L* p = labels.data<L>();
      for (int64_t i = 0; i < labels.num_elements(); ++i) {
        if (p[i] < 0 || p[i] >= classes) {
          throw_error<InvalidArgumentError>(op, "label {} at position {} is outside [0, {})", p[i],
                                            internal::position_to_string(i, labels.shape()),
                                            classes);
        }
      }
    }
  });
}

int64_t label_at(const Tensor& labels, int64_t i) {
  return labels.dtype() == DType::kI32 ? labels.data<int32_t>()[i] : labels.data<int64_t>()[i];
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
  return softmax_op("softmax", Kind::kSoftmax, x, axis);
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  return softmax_op("log_softmax", Kind::kLogSoftmax, x, axis);
}

Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims) {
  if (!is_floating(x.dtype())) internal::throw_unsupported("logsumexp", x);
  const int64_t ax = internal::normalize_axis("logsumexp", axis, x);
  if (x.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(logsumexp(internal::bf16_to_f32(x), axis, keepdims));
  }
  Tensor out =
      Tensor::empty(internal::reduced_shape(x.shape(), ax, keepdims), x.dtype(), x.device());
  const AxisView v = internal::view_around_axis(x.shape(), ax);
  internal::visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> shift;
    std::vector<double> sum;
    stats<T>(x.data<T>(), v, shift, sum, nullptr);
    T* po = out.data<T>();
    for (size_t i = 0; i < shift.size(); ++i) po[i] = shift[i] + static_cast<T>(std::log(sum[i]));
  });
  return out;
}

Tensor softmax_shift(const Tensor& max) {
  if (!is_floating(max.dtype())) internal::throw_unsupported("softmax_shift", max);
  if (max.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(softmax_shift(internal::bf16_to_f32(max)));
  }
  Tensor out = Tensor::empty(max.shape(), max.dtype(), max.device());
  internal::visit_float(max.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pm = max.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < max.num_elements(); ++i) po[i] = shift_for_max(pm[i]);
  });
  return out;
}

Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels) {
  const char* op = "sparse_softmax_cross_entropy";
  check_label_values(op, logits, labels);
  if (logits.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(
        sparse_softmax_cross_entropy(internal::bf16_to_f32(logits), labels));
  }
  Tensor loss = Tensor::empty(labels.shape(), logits.dtype(), logits.device());
  const int64_t classes = logits.shape().back();
  internal::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> shift;
    std::vector<double> sum;
    const T* x = logits.data<T>();
    exp_stats_rows<T>(x, labels.num_elements(), classes, shift, sum, nullptr);
    T* out = loss.data<T>();
    for (int64_t i = 0; i < labels.num_elements(); ++i) {
      // log(sum) - (x[label] - shift): both terms >= 0, no cancellation.
      const double picked = static_cast<double>(x[i * classes + label_at(labels, i)]) -
                            static_cast<double>(shift[static_cast<size_t>(i)]);
      out[i] = static_cast<T>(std::log(sum[static_cast<size_t>(i)]) - picked);
    }
  });
  return loss;
}

Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& grad) {
  const char* op = "sparse_softmax_cross_entropy_grad";
  check_label_values(op, logits, labels);
  if (logits.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(sparse_softmax_cross_entropy_grad(
        internal::bf16_to_f32(logits), labels, internal::bf16_to_f32(grad)));
  }
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  const int64_t classes = logits.shape().back();
  const int64_t rows = labels.num_elements();
  internal::visit_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> shift;
    std::vector<double> sum;
    T* out = dx.data<T>();
    exp_stats_rows<T>(logits.data<T>(), rows, classes, shift, sum, out);
    const T* g = grad.data<T>();
    for (int64_t i = 0; i < rows; ++i) {
      const T factor = static_cast<T>(static_cast<double>(g[i]) / sum[static_cast<size_t>(i)]);
      T* __restrict row = out + i * classes;
      for (int64_t c = 0; c < classes; ++c) row[c] *= factor;
      row[label_at(labels, i)] -= g[i];
    }
  });
  return dx;
}

Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on, double off) {
  Shape shape = indices.shape();
  shape.push_back(depth);
  Tensor out = Tensor::empty(shape, dtype, indices.device());
  const int64_t rows = indices.num_elements();
  visit_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T on_value = internal::convert<T>(on);
    const T off_value = internal::convert<T>(off);
    T* po = out.data<T>();
    std::fill(po, po + rows * depth, off_value);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t index = label_at(indices, i);
      if (index >= 0 && index < depth) po[i * depth + index] = on_value;
    }
  });
  return out;
}

}  // namespace dtensor::kernels::cpu
