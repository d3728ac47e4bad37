// The transformer family: embedding, rms_norm, rotary_embedding and
// scaled_dot_product_attention. Each is a composition of the public ops (ops/ops.h), so it shards
// the way those ops do and its VJP is theirs, recorded op by op on the tape; what this file adds
// is the validation (errors name the transformer op, its shapes and layouts) and the choice of
// composition that keeps a sharded dim sharded:
//   - embedding over a vocab-sharded table contracts a one-hot of the ids with the table, so
//     each device reads only the rows of its vocab shard (the masked gather) and the result is a
//     partial sum over the vocab's mesh dim (reduced, or reduce-scattered, by its consumer);
//   - attention keeps every batch dim (heads included) sharded as given: heads over `model`
//     cost no communication;
//   - rms_norm over a sharded last dim gives a partial mean-square, reduced once.
// The sequence-sharded cross-entropy of vocab-sharded logits is sparse_softmax_cross_entropy's
// own sharded path (ops/softmax.cc): two [..., 1] all-reduces, the logits never gathered.
#include <cmath>
#include <initializer_list>
#include <memory>
#include <optional>

#include "dtensor/creation.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "ops/expand.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

// DTypeError naming `op` for the first input that is not floating (the floor of every op here).
void check_floating_inputs(const char* op, std::initializer_list<const DTensor*> inputs) {
  for (const DTensor* x : inputs) {
    if (is_floating(x->dtype())) continue;
    throw_error<DTypeError>(op, "unsupported dtype {}: {}", dtype_name(x->dtype()),
                            x->short_string());
  }
}

// A host tensor (identical in every process) replicated on x's mesh, in x's dtype. Inside a
// captured step it is a constant of the step: made once at trace time and handed to every replay.
DTensor replicated_constant(const char* name, const Tensor& host, const DTensor& like) {
  const Layout layout = Layout::replicated(like.mesh(), host.rank());
  DTensor c = [&] {
    StepObserver* hook = StepObserver::active();
    if (hook == nullptr) return distribute(host, layout);
    auto made = std::make_shared<std::optional<DTensor>>();
    return hook->call(name, {}, [host, layout, made](const StepObserver::Inputs&) {
      if (!made->has_value()) *made = distribute(host, layout);
      return **made;
    });
  }();
  return host.dtype() == like.dtype() || host.dtype() == DType::kBool ? c : cast(c, like.dtype());
}

}  // namespace

// ---- embedding -------------------------------------------------------------------------------

DTensor embedding(const DTensor& table, const DTensor& ids) {
  check_same_mesh("embedding", {&table, &ids});
  if (ids.dtype() != DType::kI32 && ids.dtype() != DType::kI64) {
    throw_error<DTypeError>("embedding", "ids {} must be i32 or i64", ids.short_string());
  }
  check_floating_inputs("embedding", {&table});
  if (table.rank() != 2) {
    throw_error<ShapeError>("embedding", "table {} must be [vocab, dim] (ids {})",
                            table.short_string(), ids.short_string());
  }
  // The deterministic mode takes the one-hot product on every layout, so that one device sums
  // the table's gradient as a vocab-sharded table is summed (ops/expand.h).
  if (!table.layout().is_sharded(0) && !deterministic_sums()) return gather(table, ids, 0);
  // one_hot(ids) [..., V] x table [V, D]: the contraction over the sharded V is each device's
  // masked gather of its rows, and leaves a partial sum over V's mesh dim.
  // A rank-1 ids keeps matmul's rank >= 2 through a [1, ...] view; higher ranks broadcast the
  // table over their leading dims, so their sharding (the batch over data) stays in place.
  const bool scalar = ids.rank() == 0;
  DTensor onehot = one_hot(scalar ? reshape(ids, {1}) : ids, table.shape()[0], table.dtype());
  if (onehot.rank() >= 3) return matmul(onehot, table);
  Shape out = ids.shape();
  out.push_back(table.shape()[1]);
  return reshape(matmul(onehot, table), out);
}

// ---- rms_norm --------------------------------------------------------------------------------

DTensor rms_norm(const DTensor& x, const DTensor& gamma, double eps) {
  check_same_mesh("rms_norm", {&x, &gamma});
  check_floating_inputs("rms_norm", {&x});
  if (x.rank() < 1 || gamma.shape() != Shape{x.shape().back()} || gamma.dtype() != x.dtype()) {
    throw_error<ShapeError>("rms_norm", "gamma {} must be [D] of x's dtype for x {}",
                            gamma.short_string(), x.short_string());
  }
  if (!(eps >= 0)) throw_error<InvalidArgumentError>("rms_norm", "eps must be >= 0, got {}", eps);
  DTensor mean_square = reduce_mean(square(x), {-1}, true);
  DTensor rstd = rsqrt(add(mean_square, fill_like(mean_square, eps)));
  return mul(mul(x, rstd), gamma);
}

// ---- rotary_embedding ------------------------------------------------------------------------

DTensor rotary_embedding(const DTensor& x, double base) {
  check_floating_inputs("rotary_embedding", {&x});
  if (x.rank() < 2 || x.shape().back() % 2 != 0 || x.shape().back() == 0) {
    throw_error<ShapeError>("rotary_embedding", "x {} must be [..., T, D] with an even D > 0",
                            x.short_string());
  }
  if (!(base > 1.0)) {
    throw_error<InvalidArgumentError>("rotary_embedding", "base {} must be > 1 for x {}", base,
                                      x.short_string());
  }
  const int64_t t = x.shape()[x.rank() - 2], half = x.shape().back() / 2;
  Tensor cos_host = Tensor::empty({t, half}, DType::kF64);
  Tensor sin_host = Tensor::empty({t, half}, DType::kF64);
  for (int64_t p = 0; p < t; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) *
                           std::pow(base, -static_cast<double>(i) / static_cast<double>(half));
      cos_host.data<double>()[p * half + i] = std::cos(angle);
      sin_host.data<double>()[p * half + i] = std::sin(angle);
    }
  }
  DTensor c = replicated_constant("rotary_embedding", cos_host, x);
  DTensor s = replicated_constant("rotary_embedding", sin_host, x);
  std::vector<int64_t> begin(static_cast<size_t>(x.rank()), 0);
  Shape size(static_cast<size_t>(x.rank()), -1);
  size.back() = half;
  DTensor x1 = slice(x, begin, size);
  begin.back() = half;
  DTensor x2 = slice(x, begin, size);
  return concat({sub(mul(x1, c), mul(x2, s)), add(mul(x1, s), mul(x2, c))}, -1);
}

// ---- scaled_dot_product_attention ------------------------------------------------------------

namespace {

// The checks both attention ops share (errors name `op`), for inputs of rank >= min_rank.
void check_attention(const char* op, const DTensor& q, const DTensor& k, const DTensor& v,
                     bool causal, int64_t min_rank) {
  check_same_mesh(op, {&q, &k, &v});
  check_floating_inputs(op, {&q, &k, &v});
  const int64_t r = q.rank();
  auto batch = [](const DTensor& x) { return Shape(x.shape().begin(), x.shape().end() - 2); };
  const bool ranks_ok = r >= min_rank && k.rank() == r && v.rank() == r;
  if (!ranks_ok || batch(k) != batch(q) || batch(v) != batch(q) ||
      k.shape()[r - 1] != q.shape()[r - 1] || v.shape()[r - 2] != k.shape()[r - 2] ||
      (causal && q.shape()[r - 2] != k.shape()[r - 2]) || k.dtype() != q.dtype() ||
      v.dtype() != q.dtype()) {
    throw_error<ShapeError>(
        op,
        "q {}, k {} and v {} must be [..., Tq, D], [..., Tk, D] and [..., Tk, Dv] of one dtype "
        "{}(Tq == Tk when causal)",
        q.short_string(), k.short_string(), v.short_string(), min_rank > 2 ? "and rank >= 3 " : "");
  }
}

// Leading dims keep their letters (shared by every operand); the last two stay whole.
OpSignature attention_signature(const char* op, bool causal, int64_t rank, int operands) {
  std::vector<int> letters = iota_letters(rank);
  letters[static_cast<size_t>(rank - 2)] = letters[static_cast<size_t>(rank - 1)] = kBroadcastDim;
  std::vector<OperandDims> dims(static_cast<size_t>(operands), OperandDims{letters, false});
  std::vector<int> out = letters;
  if (operands == 5) out.pop_back();  // the gradient packs dq, dk and dv in one last dim
  return OpSignature{op, causal ? "causal" : "full", dims, out};
}

Grads fused_attention_grads(const DTensor& g, const DTensor& q, const DTensor& k, const DTensor& v,
                            const DTensor& y, bool causal) {
  const int64_t r = q.rank(), tq = q.shape()[r - 2], tk = k.shape()[r - 2];
  const int64_t d = q.shape()[r - 1], dv = v.shape()[r - 1];
  Shape packed_shape(q.shape().begin(), q.shape().end() - 2);
  packed_shape.push_back(tq * d + tk * (d + dv));
  const double work = 10.0 * static_cast<double>(q.num_elements() / std::max<int64_t>(1, d)) *
                      static_cast<double>(tk * (d + dv));
  DTensor packed =
      expand(attention_signature("fused_attention", causal, r, 5), {&g, &q, &k, &v, &y},
             packed_shape, q.dtype(), work, [causal](const Shards& s) {
               return kernels::attention_grad(s[0], s[1], s[2], s[3], s[4], causal);
             });
  // Each gradient is a range of the packed last dim.
  auto part = [&](int64_t begin, const Shape& shape) {
    std::vector<int64_t> at(static_cast<size_t>(r - 1), 0);
    at.back() = begin;
    Shape size(packed_shape.size(), -1);
    size.back() = shape[r - 2] * shape[r - 1];
    return reshape(slice(packed, at, size), shape);
  };
  return {part(0, q.shape()), part(tq * d, k.shape()), part(tq * d + tk * d, v.shape())};
}

}  // namespace

DTensor fused_attention(const DTensor& q, const DTensor& k, const DTensor& v, bool causal) {
  check_attention("fused_attention", q, k, v, causal, 3);
  if (q.dtype() != DType::kF32 && q.dtype() != DType::kF64) {
    throw_error<DTypeError>("fused_attention", "unsupported dtype {}: {} (f32 and f64 only)",
                            dtype_name(q.dtype()), q.short_string());
  }
  const int64_t r = q.rank();
  Shape out = q.shape();
  out.back() = v.shape().back();
  const double work =
      4.0 * static_cast<double>(q.num_elements()) * static_cast<double>(k.shape()[r - 2]);
  return recorded(
      {&q, &k, &v},
      [&] {
        return expand(attention_signature("fused_attention", causal, r, 3), {&q, &k, &v}, out,
                      q.dtype(), work, [causal](const Shards& s) {
                        return kernels::attention(s[0], s[1], s[2], causal);
                      });
      },
      [&](const DTensor& y) {
        return [q, k, v, y, causal](const DTensor& g) -> Grads {
          return fused_attention_grads(g, q, k, v, y, causal);
        };
      });
}

DTensor scaled_dot_product_attention(const DTensor& q, const DTensor& k, const DTensor& v,
                                     bool causal) {
  check_attention("scaled_dot_product_attention", q, k, v, causal, 2);
  const int64_t r = q.rank();
  const int64_t tq = q.shape()[r - 2], tk = k.shape()[r - 2];
  DTensor scores =
      scale(matmul(q, k, false, true), 1.0 / std::sqrt(static_cast<double>(q.shape()[r - 1])));
  if (causal) {
    Tensor allowed = Tensor::empty({tq, tk}, DType::kBool);
    for (int64_t i = 0; i < tq; ++i) {
      for (int64_t j = 0; j < tk; ++j) allowed.data<bool>()[i * tk + j] = j <= i;
    }
    DTensor mask = replicated_constant("scaled_dot_product_attention", allowed, q);
    // Finite, so that a masked score's gradient is an exact zero rather than NaN.
    DTensor blocked = fill({}, Layout::replicated(q.mesh(), 0), -1e30, scores.dtype());
    scores = where(mask, scores, blocked);
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace dtensor
