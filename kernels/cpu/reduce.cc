// Reductions over axes, argmax/argmin and sum_to.
//
// Every reduction is brought to the form [O, R, I] (outer, reduced, inner, row-major): adjacent
// dims that are all reduced or all kept merge, and the rare interleaved case (reduced, kept,
// reduced) is transposed first. I == 1 reduces contiguous rows with several independent
// accumulators (which vectorize); I > 1 accumulates whole rows of I elements, chunk by chunk, so
// that both the last axis and axis 0 run at memory speed.
#include <algorithm>
#include <limits>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "runtime/vector_clones.h"

namespace dtensor::kernels::cpu {
namespace {

using internal::describe;

struct Problem {
  int64_t outer = 1, reduced = 1, inner = 1;
};

// Compiled for AVX-512 and AVX2 as well (runtime/vector_clones.h): reduce_lanes' lanes and the
// rows of the I > 1 case add in the same order at every width, so the bits do not change.
template <typename T, typename Acc, typename Op, typename Finish>
DTENSOR_VECTOR_CLONES void reduce_problem(const T* x, T* out, const Problem& p, Acc init, Op op,
                                          Finish finish) {
  const int64_t R = p.reduced, I = p.inner;
  if (I == 1) {
    for (int64_t o = 0; o < p.outer; ++o)
      out[o] = finish(
          internal::reduce_lanes(x + o * R, R, init, op, [](T v) { return static_cast<Acc>(v); }));
    return;
  }
  constexpr int64_t kChunk = 512;
  Acc acc[kChunk];
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t i0 = 0; i0 < I; i0 += kChunk) {
      const int64_t len = std::min(kChunk, I - i0);
      for (int64_t j = 0; j < len; ++j) acc[j] = init;
      for (int64_t r = 0; r < R; ++r) {
        const T* __restrict row = x + (o * R + r) * I + i0;
        for (int64_t j = 0; j < len; ++j) acc[j] = op(acc[j], static_cast<Acc>(row[j]));
      }
      T* __restrict dst = out + o * I + i0;
      for (int64_t j = 0; j < len; ++j) dst[j] = finish(acc[j]);
    }
  }
}

// Sums and products accumulate floats in f64 and integers in i64 (wrapping).
template <typename T>
using WideAcc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <typename T>
T empty_value(ReduceKind kind) {
  using L = std::numeric_limits<T>;
  switch (kind) {
    case ReduceKind::kSum:
      return T{0};
    case ReduceKind::kProd:
      return T{1};
    case ReduceKind::kMax:
      if constexpr (std::is_floating_point_v<T>) return -L::infinity();
      return L::lowest();
    case ReduceKind::kMin:
      if constexpr (std::is_floating_point_v<T>) return L::infinity();
      return L::max();
    case ReduceKind::kMean:
      if constexpr (std::is_floating_point_v<T>) return L::quiet_NaN();
      return T{0};
  }
  return T{0};
}

template <typename T>
void reduce_typed(ReduceKind kind, const T* x, T* out, const Problem& p) {
  using W = WideAcc<T>;
  auto narrow = [](W v) { return static_cast<T>(v); };
  switch (kind) {
    case ReduceKind::kSum:
      return reduce_problem(
          x, out, p, W{0}, [](W a, W b) { return internal::add(a, b); }, narrow);
    case ReduceKind::kProd:
      return reduce_problem(
          x, out, p, W{1}, [](W a, W b) { return internal::mul(a, b); }, narrow);
    case ReduceKind::kMean: {
      const int64_t count = p.reduced;
      return reduce_problem(
          x, out, p, W{0}, [](W a, W b) { return internal::add(a, b); },
          [count](W v) { return static_cast<T>(v / static_cast<W>(count)); });
    }
    case ReduceKind::kMax:
      return reduce_problem(
          x, out, p, empty_value<T>(kind), [](T a, T b) { return internal::max_nan(a, b); },
          [](T v) { return v; });
    case ReduceKind::kMin:
      return reduce_problem(
          x, out, p, empty_value<T>(kind), [](T a, T b) { return internal::min_nan(a, b); },
          [](T v) { return v; });
  }
}

void reduce_bool(ReduceKind kind, const bool* x, bool* out, const Problem& p) {
  auto same = [](bool v) { return v; };
  if (kind == ReduceKind::kMax) {
    reduce_problem(
        x, out, p, false, [](bool a, bool b) { return a || b; }, same);
  } else {
    reduce_problem(
        x, out, p, true, [](bool a, bool b) { return a && b; }, same);
  }
}

bool supported(ReduceKind kind, DType d) {
  return d != DType::kBool || kind == ReduceKind::kMax || kind == ReduceKind::kMin;
}

// The [O, R, I] form of reducing `reduced` dims of x; may replace x by a transposed copy.
Problem make_problem(Tensor& x, const std::vector<bool>& reduced) {
  struct Group {
    int64_t size;
    bool reduced;
  };
  std::vector<Group> groups;
  for (size_t d = 0; d < reduced.size(); ++d) {
    const int64_t size = x.shape()[d];
    if (size == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().size *= size;
    } else {
      groups.push_back({size, reduced[d]});
    }
  }
  const auto reduced_groups =
      std::count_if(groups.begin(), groups.end(), [](const Group& g) { return g.reduced; });
  Problem p;
  if (reduced_groups <= 1) {
    bool seen = false;
    for (const Group& g : groups) {
      if (g.reduced) {
        p.reduced = g.size;
        seen = true;
      } else if (seen) {
        p.inner *= g.size;
      } else {
        p.outer *= g.size;
      }
    }
    return p;
  }
  // Interleaved: move the reduced dims last.
  std::vector<int64_t> perm;
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) {
      perm.push_back(static_cast<int64_t>(d));
      p.outer *= x.shape()[d];
    }
  }
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (reduced[d]) {
      perm.push_back(static_cast<int64_t>(d));
      p.reduced *= x.shape()[d];
    }
  }
  x = transpose(x, perm);
  return p;
}

template <bool kMax, typename T>
bool better(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    // The first NaN wins and stays.
    return (kMax ? v > best : v < best) || (v != v && best == best);
  } else {
    return kMax ? v > best : v < best;
  }
}

template <bool kMax, typename T>
void arg_reduce(const T* x, int64_t* out, const internal::AxisView& v) {
  const int64_t R = v.n, I = v.inner;
  if (I == 1) {
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* row = x + o * R;
      T best = row[0];
      int64_t index = 0;
      for (int64_t r = 1; r < R; ++r) {
        if (better<kMax>(row[r], best)) {
          best = row[r];
          index = r;
        }
      }
      out[o] = index;
    }
    return;
  }
  std::vector<T> best_row(static_cast<size_t>(I));
  for (int64_t o = 0; o < v.outer; ++o) {
    T* __restrict best = best_row.data();
    int64_t* __restrict index = out + o * I;
    std::copy(x + o * R * I, x + o * R * I + I, best);
    std::fill(index, index + I, int64_t{0});
    for (int64_t r = 1; r < R; ++r) {
      const T* __restrict row = x + (o * R + r) * I;
      for (int64_t i = 0; i < I; ++i) {
        const bool b = better<kMax>(row[i], best[i]);
        best[i] = b ? row[i] : best[i];
        index[i] = b ? r : index[i];
      }
    }
  }
}

template <bool kMax>
Tensor arg_reduce_op(const char* op, const Tensor& x_in, int64_t axis, bool keepdims) {
  if (x_in.dtype() == DType::kBool) internal::throw_unsupported(op, x_in);
  const int64_t ax = internal::normalize_axis(op, axis, x_in);
  if (x_in.dim(ax) == 0) {
    throw_error<InvalidArgumentError>(op, "cannot reduce over empty axis {} of {}", axis,
                                      describe(x_in));
  }
  const Tensor x = x_in.dtype() == DType::kBF16 ? internal::bf16_to_f32(x_in) : x_in;
  Tensor out =
      Tensor::empty(internal::reduced_shape(x.shape(), ax, keepdims), DType::kI64, x.device());
  const internal::AxisView view = internal::view_around_axis(x.shape(), ax);
  internal::visit_numeric(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    arg_reduce<kMax>(x.data<T>(), out.data<int64_t>(), view);
  });
  return out;
}

}  // namespace

Tensor reduce(ReduceKind kind, const Tensor& x_in, const std::vector<int64_t>& axes,
              bool keepdims) {
  const std::string name(reduce_kind_name(kind));
  if (!supported(kind, x_in.dtype())) internal::throw_unsupported(name.c_str(), x_in);
  const int64_t rank = x_in.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      throw_error<InvalidArgumentError>(name, "axis {} is out of range for {}", axis,
                                        describe(x_in));
    }
    const size_t d = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    if (reduced[d]) {
      throw_error<InvalidArgumentError>(name, "duplicate axis {} in [{}] for {}", axis,
                                        fmt::join(axes, ","), describe(x_in));
    }
    reduced[d] = true;
  }
  Shape out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[static_cast<size_t>(d)]) {
      out_shape.push_back(x_in.dim(d));
    } else if (keepdims) {
      out_shape.push_back(1);
    }
  }
  if (x_in.dtype() == DType::kBF16) {
    Tensor f = reduce(kind, internal::bf16_to_f32(x_in), axes, keepdims);
    return internal::f32_to_bf16(f);
  }
  Tensor out = Tensor::empty(out_shape, x_in.dtype(), x_in.device());
  if (out.num_elements() == 0) return out;
  if (x_in.num_elements() == 0) {  // a reduced dim is empty
    if (x_in.dtype() == DType::kBool) {
      std::fill_n(out.data<bool>(), out.num_elements(), kind == ReduceKind::kMin);
    } else {
      internal::visit_numeric(x_in.dtype(), [&](auto tag) {
        using T = decltype(tag);
        std::fill_n(out.data<T>(), out.num_elements(), empty_value<T>(kind));
      });
    }
    return out;
  }
  Tensor x = x_in;
  const Problem p = make_problem(x, reduced);
  if (x.dtype() == DType::kBool) {
    reduce_bool(kind, x.data<bool>(), out.data<bool>(), p);
  } else {
    internal::visit_numeric(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      reduce_typed<T>(kind, x.data<T>(), out.data<T>(), p);
    });
  }
  return out;
}

Tensor argmax(const Tensor& x, int64_t axis, bool keepdims) {
  return arg_reduce_op<true>("argmax", x, axis, keepdims);
}

Tensor argmin(const Tensor& x, int64_t axis, bool keepdims) {
  return arg_reduce_op<false>("argmin", x, axis, keepdims);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.dtype() == DType::kBool) internal::throw_unsupported("sum_to", x);
  if (!internal::broadcasts_to(shape, x.shape())) {
    throw_error<ShapeError>("sum_to", "cannot sum {} to {}", describe(x), shape_to_string(shape));
  }
  const int64_t lead = x.rank() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && x.dim(d) != 1)) {
      axes.push_back(d);
    }
  }
  if (axes.empty()) return x.clone().reshaped(shape);
  return reduce(ReduceKind::kSum, x, axes, /*keepdims=*/true).reshaped(shape);
}

}  // namespace dtensor::kernels::cpu
