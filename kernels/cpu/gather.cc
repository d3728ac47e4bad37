// gather and its adjoint scatter_add; the vocab-parallel embedding's masked gather and scatter-add
// on a table shard.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"

namespace dtensor::kernels::cpu {
namespace {

// Reads every index as i64.
std::vector<int64_t> read_indices(const Tensor& indices) {
  std::vector<int64_t> result(static_cast<size_t>(indices.num_elements()));
  visit_dtype(indices.dtype(), [&](auto tag) {
    using I = decltype(tag);
    if constexpr (std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>) {
      const I* p = indices.data<I>();
      for (size_t i = 0; i < result.size(); ++i) result[i] = static_cast<int64_t>(p[i]);
    }
  });
  return result;
}

// Reads every index as i64, checking it against [0, limit).
std::vector<int64_t> checked_indices(const char* op, const Tensor& indices, int64_t limit) {
  std::vector<int64_t> result = read_indices(indices);
  for (size_t i = 0; i < result.size(); ++i) {
    if (result[i] < 0 || result[i] >= limit) {
      throw_error<InvalidArgumentError>(
          op, "index {} at position {} is outside [0, {})", result[i],
          internal::position_to_string(static_cast<int64_t>(i), indices.shape()), limit);
    }
  }
  return result;
}

using checks::gathered_shape;

template <typename T>
void scatter_rows(const T* updates, T* out, const std::vector<int64_t>& index,
                  const internal::AxisView& view) {
  const int64_t count = static_cast<int64_t>(index.size());
  const int64_t inner = view.inner;
  for (int64_t o = 0; o < view.outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t row = index[static_cast<size_t>(j)];
      if (row < 0) continue;  // not this shard's (scatter_add_shard_rows)
      T* __restrict dst = out + (o * view.n + row) * inner;
      const T* __restrict src = updates + (o * count + j) * inner;
      for (int64_t k = 0; k < inner; ++k) dst[k] = internal::add(dst[k], src[k]);
    }
  }
}

// scatter_rows along axis 0 in chunks of `per_chunk` updates: each chunk's rows summed in T in
// index order, then added into an f64 sum per row in chunk order and rounded once (the fold of
// ops/expand.h's chunked sums; a chunk that misses a row adds its exact zero, so it is skipped).
// Only the rows the updates touch get accumulators: no table-sized temporary.
template <typename T>
void scatter_rows_chunked(const T* updates, T* out, const std::vector<int64_t>& rows, int64_t inner,
                          int64_t per_chunk) {
  std::unordered_map<int64_t, size_t> slot_of;  // row -> accumulator
  std::vector<int64_t> slot_row;
  std::vector<double> total;
  std::vector<T> chunk;
  std::vector<size_t> in_chunk;
  std::vector<char> seen;
  const size_t n = static_cast<size_t>(inner);
  const int64_t count = static_cast<int64_t>(rows.size());
  for (int64_t begin = 0; begin < count; begin += per_chunk) {
    const int64_t end = std::min(count, begin + per_chunk);
    for (int64_t j = begin; j < end; ++j) {
      const int64_t row = rows[static_cast<size_t>(j)];
      if (row < 0) continue;
      auto [it, added] = slot_of.try_emplace(row, slot_row.size());
      const size_t slot = it->second;
      if (added) {
        slot_row.push_back(row);
        total.resize(total.size() + n, 0.0);
        chunk.resize(chunk.size() + n, T(0));
        seen.push_back(0);
      }
      if (!seen[slot]) {
        seen[slot] = 1;
        in_chunk.push_back(slot);
      }
      T* __restrict dst = chunk.data() + slot * n;
      const T* __restrict src = updates + j * inner;
      for (size_t k = 0; k < n; ++k) dst[k] = internal::add(dst[k], src[k]);
    }
    for (size_t slot : in_chunk) {
      for (size_t k = 0; k < n; ++k) {
        total[slot * n + k] += static_cast<double>(chunk[slot * n + k]);
        chunk[slot * n + k] = T(0);
      }
      seen[slot] = 0;
    }
    in_chunk.clear();
  }
  for (size_t slot = 0; slot < slot_row.size(); ++slot) {
    T* dst = out + slot_row[slot] * inner;
    for (size_t k = 0; k < n; ++k) dst[k] = static_cast<T>(total[slot * n + k]);
  }
}

// A table shard's (first row, rows) (kernel_list.h: gather_shard_rows).
std::pair<int64_t, int64_t> shard_rows(const Tensor& shard) {
  return {shard.data<int64_t>()[0], shard.data<int64_t>()[1]};
}

}  // namespace

Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  DTENSOR_CHECK(params.rank() >= 1);  // checks::gather
  const int64_t ax = internal::normalize_axis("gather", axis, params);
  const internal::AxisView view = internal::view_around_axis(params.shape(), ax);
  const std::vector<int64_t> index = checked_indices("gather", indices, view.n);
  Tensor out = Tensor::empty(gathered_shape(params.shape(), indices.shape(), ax), params.dtype(),
                             params.device());
  if (out.num_elements() == 0) return out;
  const int64_t count = static_cast<int64_t>(index.size());
  internal::visit_element_size(dtype_size(params.dtype()), [&](auto tag) {
    using U = decltype(tag);
    const U* src = static_cast<const U*>(params.raw_data());
    U* dst = static_cast<U*>(out.raw_data());
    for (int64_t o = 0; o < view.outer; ++o) {
      for (int64_t j = 0; j < count; ++j) {
        const U* row = src + (o * view.n + index[static_cast<size_t>(j)]) * view.inner;
        std::copy_n(row, view.inner, dst);
        dst += view.inner;
      }
    }
  });
  return out;
}

Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis) {
  const char* op = "scatter_add";
  DTENSOR_CHECK(!shape.empty());  // checks::scatter_add
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
  const internal::AxisView view = internal::view_around_axis(shape, ax);
  const std::vector<int64_t> index = checked_indices(op, indices, view.n);
  if (updates.dtype() == DType::kBF16) {
    Tensor f = scatter_add(shape, indices, internal::bf16_to_f32(updates), axis);
    return internal::f32_to_bf16(f);
  }
  Tensor out = Tensor::zeros(shape, updates.dtype(), updates.device());
  internal::visit_numeric(updates.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scatter_rows<T>(updates.data<T>(), out.data<T>(), index, view);
  });
  return out;
}

Tensor gather_shard_rows(const Tensor& params, const Tensor& indices, const Tensor& shard,
                         int64_t vocab) {
  const std::vector<int64_t> index = checked_indices("gather", indices, vocab);
  const int64_t first = shard_rows(shard).first, rows = params.dim(0);
  const internal::AxisView view = internal::view_around_axis(params.shape(), 0);
  Tensor out = Tensor::zeros(gathered_shape(params.shape(), indices.shape(), 0), params.dtype(),
                             params.device());
  if (out.num_elements() == 0) return out;
  const size_t row_bytes = static_cast<size_t>(view.inner) * dtype_size(params.dtype());
  const char* src = static_cast<const char*>(params.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t j = 0; j < index.size(); ++j) {
    const int64_t row = index[j] - first;
    if (row < 0 || row >= rows) continue;  // another shard's row: stays zero
    std::memcpy(dst + j * row_bytes, src + static_cast<size_t>(row) * row_bytes, row_bytes);
  }
  return out;
}

Tensor scatter_add_shard_rows(const Tensor& indices, const Tensor& updates, const Tensor& shard,
                              int64_t chunk_rows) {
  if (updates.dtype() == DType::kBF16) {
    return internal::f32_to_bf16(
        scatter_add_shard_rows(indices, internal::bf16_to_f32(updates), shard));
  }
  const auto [first, rows] = shard_rows(shard);
  Shape shape = {rows};
  shape.insert(shape.end(), updates.shape().begin() + indices.rank(), updates.shape().end());
  // The ids of this shard as local rows, the others marked for scatter_rows to skip.
  std::vector<int64_t> local = read_indices(indices);
  for (int64_t& id : local) id = id - first >= 0 && id - first < rows ? id - first : -1;
  const internal::AxisView view = internal::view_around_axis(shape, 0);
  Tensor out = Tensor::zeros(shape, updates.dtype(), updates.device());
  if (chunk_rows > 0) {
    const int64_t lead = indices.rank() > 0 ? indices.dim(0) : 1;
    const int64_t per_chunk = lead == 0 ? 1 : chunk_rows * (indices.num_elements() / lead);
    if (updates.dtype() == DType::kF32) {
      scatter_rows_chunked<float>(updates.data<float>(), out.data<float>(), local, view.inner,
                                  per_chunk);
    } else {
      scatter_rows_chunked<double>(updates.data<double>(), out.data<double>(), local, view.inner,
                                   per_chunk);
    }
    return out;
  }
  internal::visit_numeric(updates.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scatter_rows<T>(updates.data<T>(), out.data<T>(), local, view);
  });
  return out;
}

}  // namespace dtensor::kernels::cpu
