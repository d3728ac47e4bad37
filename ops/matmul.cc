// The matmul family: [..., m, k] x [..., k, n] with broadcast batch dims. Letters: the batch dims
// as elementwise ones, then M, N and the contracted K; a K sharded on both sides makes the output
// a partial sum, reduced where a consumer needs it. The VJP is two more matmuls.
#include <algorithm>

#include "dtensor/relayout.h"
#include "kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"
#include "ops/precision.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

DTensor matmul_forward(const DTensor& a_in, const DTensor& b_in, bool transpose_a, bool transpose_b,
                       bool f32_output) {
  check_same_mesh("matmul", {&a_in, &b_in});
  check_same_dtype("matmul", a_in, b_in);
  // The deterministic mode takes no partial operand: its chunked sums need whole ones.
  const DTensor a = deterministic_sums() ? without_partial(a_in) : a_in;
  const DTensor b = deterministic_sums() ? without_partial(b_in) : b_in;
  if (a.rank() < 2 || b.rank() < 2) {
    throw_error<ShapeError>("matmul", "operands need rank >= 2: {} x {}", a.short_string(),
                            b.short_string());
  }
  const int64_t ra = a.rank(), rb = b.rank();
  const int64_t m = a.shape()[ra - (transpose_a ? 1 : 2)];
  const int64_t ka = a.shape()[ra - (transpose_a ? 2 : 1)];
  const int64_t kb = b.shape()[rb - (transpose_b ? 1 : 2)];
  const int64_t n = b.shape()[rb - (transpose_b ? 2 : 1)];
  if (ka != kb) {
    throw_error<ShapeError>("matmul", "contraction dims differ ({} vs {}): {}{} x {}{}", ka, kb,
                            a.short_string(), transpose_a ? "^T" : "", b.short_string(),
                            transpose_b ? "^T" : "");
  }
  // Batch dims broadcast like elementwise dims.
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch(std::max(batch_a.size(), batch_b.size()), 1);
  for (size_t i = 0; i < batch.size(); ++i) {
    int64_t da =
        i < batch.size() - batch_a.size() ? 1 : batch_a[i - (batch.size() - batch_a.size())];
    int64_t db =
        i < batch.size() - batch_b.size() ? 1 : batch_b[i - (batch.size() - batch_b.size())];
    if (da != db && da != 1 && db != 1) {
      throw_error<ShapeError>("matmul", "batch dims do not broadcast: {} x {}", a.short_string(),
                              b.short_string());
    }
    batch[i] = da == 1 ? db : da;
  }
  const int nb = static_cast<int>(batch.size());
  const int lm = nb, ln = nb + 1, lk = nb + 2;
  OperandDims da = broadcast_operand(batch_a, batch, true);
  OperandDims db = broadcast_operand(batch_b, batch, true);
  if (transpose_a)
    da.letters.insert(da.letters.end(), {lk, lm});
  else
    da.letters.insert(da.letters.end(), {lm, lk});
  if (transpose_b)
    db.letters.insert(db.letters.end(), {ln, lk});
  else
    db.letters.insert(db.letters.end(), {lk, ln});
  std::vector<int> out_letters = iota_letters(nb);
  out_letters.push_back(lm);
  out_letters.push_back(ln);
  Shape out = batch;
  out.push_back(m);
  out.push_back(n);
  // The transposes decide where the letters sit, so they are part of the cache key.
  const char transposes[] = {transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', '\0'};
  OpSignature sig{"matmul", transposes, {da, db}, out_letters, Linearity::kMultilinear};
  const double flops = 2.0 * static_cast<double>(num_elements(batch)) * m * n * ka;
  // A plain [m,k] left operand is row-separable: devices sharing b run as one call. The devices
  // of a partial group (K sharded) run as one call on their K slices put together.
  Stacking stacking;
  if (a.rank() == 2 && b.rank() == 2) {
    stacking.rows_of = transpose_a ? -1 : 0;
    stacking.contraction_axes = {transpose_a ? 0 : 1, transpose_b ? 1 : 0};
  }
  // The deterministic mode sums every product over K in fixed chunks of the global K, added in
  // order (ops/expand.h): one device, K split over a mesh dim and K split over processes give
  // the same bits.
  if (deterministic_sums() && is_floating(a.dtype()) && !f32_output) {
    stacking.contraction_axes = {ra - (transpose_a ? 2 : 1), rb - (transpose_b ? 1 : 2)};
    stacking.chunk_rows = invariant_chunk_rows(ka, flops);
  }
  return expand(
      sig, {&a, &b}, out, f32_output ? DType::kF32 : a.dtype(), flops,
      [=](const Shards& s) {
        kernels::MatmulOptions options{transpose_a, transpose_b, local_blas_threads()};
        options.f32_output = f32_output;
        return kernels::matmul(s[0], s[1], options);
      },
      stacking);
}

// ---- dense: activation(x @ w + b) as one kernel ----

DTensor dense_forward(const DTensor& x, const DTensor& w, const DTensor& b,
                      DenseActivation activation, bool f32_output) {
  check_same_mesh("dense", {&x, &w, &b});
  check_same_dtype("dense", x, w);
  // The bias is in the output's dtype (f32 for bf16 products with an f32 output).
  if (!f32_output) check_same_dtype("dense", x, b);
  if (x.rank() < 2 || w.rank() != 2 || b.rank() != 1) {
    throw_error<ShapeError>("dense", "need x of rank >= 2, w of rank 2 and b of rank 1: {}, {}, {}",
                            x.short_string(), w.short_string(), b.short_string());
  }
  const int64_t rx = x.rank();
  const int64_t k = x.shape()[rx - 1], n = w.shape()[1];
  if (w.shape()[0] != k || b.shape()[0] != n) {
    throw_error<ShapeError>("dense", "x [..., m, k], w [k, n] and b [n] do not fit: {}, {}, {}",
                            x.short_string(), w.short_string(), b.short_string());
  }
  // matmul's letters (x's batch dims, then M, K; w's K, N) plus the bias on N.
  const int nb = static_cast<int>(rx - 2);
  const int lm = nb, ln = nb + 1, lk = nb + 2;
  OperandDims dx{iota_letters(nb), false};
  dx.letters.insert(dx.letters.end(), {lm, lk});
  const OperandDims dw{{lk, ln}, false};
  const OperandDims db{{ln}, false};
  std::vector<int> out_letters = iota_letters(nb);
  out_letters.push_back(lm);
  out_letters.push_back(ln);
  const bool relu_after = activation == DenseActivation::kRelu;
  OpSignature sig{"dense", relu_after ? "relu" : "", {dx, dw, db}, out_letters, Linearity::kNone};
  // A sharded K makes the product partial: the bias and the activation must wait for the sum,
  // so that case runs unfused (the reduction happens where add needs it).
  // The deterministic mode's chunked sums are matmul's.
  if (deterministic_sums() || decide_sharding(sig, {&x, &w, &b})->output.is_partial()) {
    DTensor y = add(matmul_forward(x, w, false, false, f32_output), b);
    return relu_after ? relu(y) : y;
  }
  Shape out(x.shape().begin(), x.shape().end() - 1);
  out.push_back(n);
  const double flops = 2.0 * static_cast<double>(num_elements(out)) * static_cast<double>(k);
  Stacking stacking;
  if (rx == 2) stacking.rows_of = 0;  // rows of x are independent; w and b shared
  const std::optional<kernels::UnaryOp> act =
      relu_after ? std::optional<kernels::UnaryOp>(kernels::UnaryOp::kRelu) : std::nullopt;
  return expand(
      sig, {&x, &w, &b}, out, f32_output ? DType::kF32 : x.dtype(), flops,
      [act, f32_output](const Shards& s) {
        kernels::MatmulOptions options{false, false, local_blas_threads()};
        options.f32_output = f32_output;
        return kernels::dense(s[0], s[1], &s[2], act, options);
      },
      stacking);
}

// The VJPs below take the operands the forward product used (f32, or the bf16 copies of f32
// variables under a mixed policy) and `product(a, b, ta, tb)`, the product that made y: matmul,
// or the f32 result of bf16 operands. The incoming gradient is cast once to the operands' dtype,
// for both products.
DTensor in_dtype(const DTensor& g, DType dtype) { return g.dtype() == dtype ? g : cast(g, dtype); }

template <typename Product>
Grads matmul_grads(const DTensor& g, const DTensor& a, const DTensor& b, bool ta, bool tb,
                   const Shape& sa, const Shape& sb, const Product& product) {
  const DTensor gp = in_dtype(g, a.dtype());
  Grads grads(2);
  if (gradient_needed(0)) {
    DTensor ga = !ta ? (!tb ? product(gp, b, false, true) : product(gp, b, false, false))
                     : (!tb ? product(b, gp, false, true) : product(b, gp, true, true));
    grads[0] = sum_to(ga, sa);
  }
  if (gradient_needed(1)) {
    DTensor gb = !tb ? (!ta ? product(a, gp, true, false) : product(a, gp, false, false))
                     : (!ta ? product(gp, a, true, false) : product(gp, a, true, true));
    grads[1] = sum_to(gb, sb);
  }
  return grads;
}

// dense's VJP: the gradient before the activation (in y's dtype), then matmul's and add's.
template <typename Product>
Grads dense_grads(const DTensor& g, const DTensor& y, DenseActivation activation, const DTensor& x,
                  const DTensor& w, const Shape& sx, const Shape& sw, const Shape& sb,
                  const Product& product) {
  const DTensor gz = activation == DenseActivation::kRelu ? mul(g, relu_mask(y)) : g;
  const DTensor gp = in_dtype(gz, x.dtype());
  Grads grads(3);
  if (gradient_needed(0)) grads[0] = sum_to(product(gp, w, false, true), sx);
  if (gradient_needed(1)) grads[1] = sum_to(product(x, gp, true, false), sw);
  if (gradient_needed(2)) grads[2] = sum_to(gz, sb);
  return grads;
}

DTensor public_matmul(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  return matmul(a, b, ta, tb);
}

DTensor f32_product(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  return matmul_forward(a, b, ta, tb, /*f32_output=*/true);
}

}  // namespace

DTensor matmul(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  if (precision_internal::runs_mixed(a, b)) return precision_internal::mixed_matmul(a, b, ta, tb);
  return recorded(
      {&a, &b}, [&] { return matmul_forward(a, b, ta, tb, false); },
      [&](const DTensor&) {
        return [a, b, ta, tb](const DTensor& g) -> Grads {
          return matmul_grads(g, a, b, ta, tb, a.shape(), b.shape(), public_matmul);
        };
      });
}

DTensor dense(const DTensor& x, const DTensor& w, const DTensor& b, DenseActivation activation) {
  if (precision_internal::runs_mixed(x, w)) {
    return precision_internal::mixed_dense(x, w, b, activation);
  }
  return recorded(
      {&x, &w, &b}, [&] { return dense_forward(x, w, b, activation, false); },
      [&](const DTensor& y) {
        return [x, w, sb = b.shape(), y, activation](const DTensor& g) -> Grads {
          return dense_grads(g, y, activation, x, w, x.shape(), w.shape(), sb, public_matmul);
        };
      });
}

// The mixed forms: bf16 copies of the f32 operands (weights from the copy their optimizer keeps),
// products with f32 results straight from the accumulator, f32 gradients for the f32 inputs.
DTensor precision_internal::mixed_matmul(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  const DTensor a16 = bf16_operand(a), b16 = bf16_operand(b);
  return recorded(
      {&a, &b}, [&] { return f32_product(a16, b16, ta, tb); },
      [&](const DTensor&) {
        return [a16, b16, ta, tb, sa = a.shape(), sb = b.shape(),
                bf16 = bf16_reduction()](const DTensor& g) -> Grads {
          return reduced_as_policy(matmul_grads(g, a16, b16, ta, tb, sa, sb, f32_product), bf16);
        };
      });
}

DTensor precision_internal::mixed_dense(const DTensor& x, const DTensor& w, const DTensor& b,
                                        DenseActivation activation) {
  const DTensor x16 = bf16_operand(x), w16 = bf16_weight(w);
  const DTensor b32 =
      b.dtype() == DType::kF32 ? b : unrecorded([&] { return cast(b, DType::kF32); });
  return recorded(
      {&x, &w, &b}, [&] { return dense_forward(x16, w16, b32, activation, /*f32_output=*/true); },
      [&](const DTensor& y) {
        return [x16, w16, sx = x.shape(), sw = w.shape(), sb = b.shape(), y, activation,
                bf16 = bf16_reduction()](const DTensor& g) -> Grads {
          return reduced_as_policy(dense_grads(g, y, activation, x16, w16, sx, sw, sb, f32_product),
                                   bf16);
        };
      });
}

}  // namespace dtensor
