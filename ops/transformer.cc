// The transformer family: embedding, rms_norm, rotary_embedding and
// scaled_dot_product_attention. rms_norm, rotary_embedding and the attention are compositions of
// the public ops (ops/ops.h), so they shard the way those ops do and their VJPs are theirs,
// recorded op by op on the tape; what this file adds is the validation (errors name the
// transformer op, its shapes and layouts) and the choice of composition that keeps a sharded dim
// sharded:
//   - embedding over a vocab-sharded table is vocab-parallel (Megatron's): each device gathers
//     the rows of ids in its vocab shard, zeros for the others (kernels::gather_shard_rows), so
//     the result is a partial sum over the vocab's mesh dim (reduced, or reduce-scattered, by its
//     consumer); its VJP scatter-adds dy into each device's rows in a fixed order
//     (kernels::scatter_add_shard_rows). A whole table is a plain gather (ops/gather.cc);
//   - attention keeps every batch dim (heads included) sharded as given: heads over `model`
//     cost no communication;
//   - rms_norm over a sharded last dim gives a partial mean-square, reduced once.
// The sequence-sharded cross-entropy of vocab-sharded logits is sparse_softmax_cross_entropy's
// own sharded path (ops/softmax.cc): two [..., 1] all-reduces, the logits never gathered.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
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

// A host tensor (identical in every process) distributed in `layout`. Inside a captured step it
// is a constant of the step: made once at trace time and handed to every replay.
DTensor step_constant(const char* name, const Tensor& host, const Layout& layout) {
  StepObserver* hook = StepObserver::active();
  if (hook == nullptr) return distribute(host, layout);
  auto made = std::make_shared<std::optional<DTensor>>();
  return hook->call(name, {}, [host, layout, made](const StepObserver::Inputs&) {
    if (!made->has_value()) *made = distribute(host, layout);
    return **made;
  });
}

// A host tensor replicated on x's mesh, in x's dtype, as a constant of a captured step.
DTensor replicated_constant(const char* name, const Tensor& host, const DTensor& like) {
  DTensor c = step_constant(name, host, Layout::replicated(like.mesh(), host.rank()));
  return host.dtype() == like.dtype() || host.dtype() == DType::kBool ? c : cast(c, like.dtype());
}

}  // namespace

// ---- embedding -------------------------------------------------------------------------------

namespace {

// The operands of the vocab-parallel embedding in the layouts its kernels need: the ids with no
// dim on the table's mesh dims (each device must see every id that its rows may serve), the table
// whole along D where the ids use D's mesh dim, and `rows`: the (first row, rows) pair of every
// vocab shard, an i64 [2k] sharded over the vocab's mesh dim (of size k; 1 when V is whole), so
// that each device's pair is one of its shards, on its device, for the kernels to read.
struct VocabShards {
  DTensor table, ids, rows;
  Layout output;  // the ids' specs and D's, partial over the vocab's mesh dim
};

// What the VJP keeps: the forward's operands but the table, of which only the place matters.
struct VocabGradPlan {
  DTensor ids, rows;
  Layout output, table_layout;
  Shape table_shape;
};

VocabShards vocab_shards(const DTensor& table_in, const DTensor& ids_in) {
  const Mesh& mesh = table_in.mesh();
  const std::string vocab = table_in.layout().spec(0);
  std::vector<std::string> id_specs = ids_in.layout().sharding_specs();
  for (std::string& s : id_specs) {
    if (s == vocab) s = Layout::kUnsharded;
  }
  std::string dim = table_in.layout().spec(1);
  if (std::find(id_specs.begin(), id_specs.end(), dim) != id_specs.end()) {
    dim = Layout::kUnsharded;
  }
  DTensor table = relayout(table_in, Layout({vocab, dim}, mesh));
  const int64_t vocab_dim = table.layout().mesh_dim_of(0);
  const int64_t k = vocab_dim < 0 ? 1 : mesh.dim_size(vocab);
  Tensor pairs = Tensor::empty({2 * k}, DType::kI64);
  std::vector<int64_t> coords(static_cast<size_t>(mesh.rank()), 0);
  for (int64_t c = 0; c < k; ++c) {
    if (vocab_dim >= 0) coords[static_cast<size_t>(vocab_dim)] = c;
    const ShardRange r = table.layout().shard_range(table.shape(), 0, mesh.device_id(coords));
    pairs.data<int64_t>()[2 * c] = r.offset;
    pairs.data<int64_t>()[2 * c + 1] = r.size;
  }
  std::vector<std::string> out_specs = id_specs;
  out_specs.push_back(dim);
  std::vector<PartialDim> partial;
  if (vocab_dim >= 0) partial.push_back({vocab, ReduceOp::kSum});
  return VocabShards{table, relayout(ids_in, Layout(id_specs, mesh)),
                     step_constant("embedding", pairs, Layout({vocab}, mesh)),
                     Layout(out_specs, mesh, partial)};
}

// Each device gathers the rows of its shard, zeros for the other ids (kernels::gather_shard_rows).
DTensor masked_gather(const VocabShards& v, int64_t vocab_size) {
  Shape out = v.ids.shape();
  out.push_back(v.table.shape()[1]);
  validate_shape(out, "embedding");
  return run_local({&v.table, &v.ids, &v.rows}, v.output, out, v.table.dtype(),
                   static_cast<double>(num_elements(out)), [vocab_size](const Shards& s) {
                     return kernels::gather_shard_rows(s[0], s[1], s[2], vocab_size);
                   });
}

// The VJP: dy scatter-added into each device's rows (kernels::scatter_add_shard_rows), a partial
// sum over the ids' mesh dims, reduced when it reaches the variable's layout. Ids sharded on their
// first dim only sum in fixed chunks of it (Stacking::chunk_rows; ops/README.md "Batch-invariant
// sums"), so that the bits do not depend on how the batch is split; the deterministic mode brings
// the other dims whole first (the sequence, over seq), so that every layout sums so.
DTensor shard_scatter_add(const VocabGradPlan& v, const DTensor& g_in) {
  const Mesh& mesh = v.table_layout.mesh();
  DTensor ids = v.ids;
  if (deterministic_sums() && ids.rank() > 1) {
    std::vector<std::string> specs(static_cast<size_t>(ids.rank()), Layout::kUnsharded);
    specs[0] = ids.layout().spec(0);
    ids = relayout(ids, Layout(specs, mesh));
  }
  std::vector<std::string> g_specs = ids.layout().sharding_specs();
  g_specs.push_back(v.output.spec(v.output.rank() - 1));
  const DTensor g = relayout(g_in, Layout(g_specs, mesh));
  std::vector<PartialDim> partial;
  for (int64_t m = 0; m < mesh.rank(); ++m) {
    if ((ids.layout().sharded_mask() >> m) & 1u) partial.push_back({mesh.dims()[m].name});
  }
  const double work = static_cast<double>(g.num_elements());
  Stacking stacking;
  stacking.op = "embedding";
  bool rows_only = ids.rank() >= 1;
  for (int64_t d = 1; d < ids.rank() && rows_only; ++d) rows_only = !ids.layout().is_sharded(d);
  int64_t kernel_chunks = 0;
  if (rows_only) {
    const int64_t chunk = invariant_chunk_rows(ids.shape()[0], work);
    const bool wide = g.dtype() == DType::kF32 || g.dtype() == DType::kF64;
    if (!ids.layout().is_sharded(0) && wide) {
      // Every device holds all its chunks: the kernel folds them itself, to the same bits,
      // without a table-sized value per chunk.
      kernel_chunks = chunk;
    } else {
      stacking.contraction_axes = {0, 0, Stacking::kShared};
      stacking.chunk_rows = chunk;
      // A group's chunks folded by one kernel call, as above: accumulators for the touched rows
      // only, not one [V/k, D] value per chunk.
      if (wide) {
        stacking.fold_chunks = [chunk](const Shards& s) {
          return kernels::scatter_add_shard_rows(s[0], s[1], s[2], chunk);
        };
      }
    }
  }
  return run_local(
      {&ids, &g, &v.rows}, v.table_layout.with_partial(partial), v.table_shape, g.dtype(), work,
      [kernel_chunks](const Shards& s) {
        return kernels::scatter_add_shard_rows(s[0], s[1], s[2], kernel_chunks);
      },
      stacking);
}

}  // namespace

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
  // The deterministic mode takes the vocab-parallel path on every layout, so that one device
  // sums the table's gradient as a vocab-sharded table is summed.
  if (!table.layout().is_sharded(0) && !deterministic_sums()) return gather(table, ids, 0);
  std::optional<VocabShards> v;
  return recorded(
      {&table},
      [&] {
        v = vocab_shards(table, ids);
        return masked_gather(*v, table.shape()[0]);
      },
      [&](const DTensor&) {
        return
            [plan = VocabGradPlan{v->ids, v->rows, v->output, v->table.layout(), v->table.shape()}](
                const DTensor& g) -> Grads { return {shard_scatter_add(plan, g)}; };
      });
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
