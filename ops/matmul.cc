// The matmul family: [..., m, k] x [..., k, n] with broadcast batch dims. Letters: the batch dims
// as elementwise ones, then M, N and the contracted K; a K sharded on both sides makes the output
// a partial sum, reduced where a consumer needs it. The VJP is two more matmuls.
#include <algorithm>

#include "ops/kernels/kernels.h"
#include "ops/op_internal.h"
#include "ops/ops.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

DTensor matmul_forward(const DTensor& a, const DTensor& b, bool transpose_a, bool transpose_b) {
  check_same_mesh("matmul", {&a, &b});
  check_same_dtype("matmul", a, b);
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
  return expand(
      sig, {&a, &b}, out, a.dtype(), flops,
      [=](const Shards& s) {
        return kernels::matmul(s[0], s[1], {transpose_a, transpose_b, local_blas_threads()});
      },
      stacking);
}

}  // namespace

DTensor matmul(const DTensor& a, const DTensor& b, bool ta, bool tb) {
  return recorded(
      {&a, &b}, [&] { return matmul_forward(a, b, ta, tb); },
      [&](const DTensor&) {
        return [a, b, ta, tb](const DTensor& g) -> Grads {
          Grads grads(2);
          if (gradient_needed(0)) {
            DTensor ga = !ta ? (!tb ? matmul(g, b, false, true) : matmul(g, b, false, false))
                             : (!tb ? matmul(b, g, false, true) : matmul(b, g, true, true));
            grads[0] = sum_to(ga, a.shape());
          }
          if (gradient_needed(1)) {
            DTensor gb = !tb ? (!ta ? matmul(a, g, true, false) : matmul(a, g, false, false))
                             : (!ta ? matmul(g, a, true, false) : matmul(g, a, true, true));
            grads[1] = sum_to(gb, b.shape());
          }
          return grads;
        };
      });
}

}  // namespace dtensor
