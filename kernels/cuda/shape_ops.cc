// Data movement on the GPU: transpose, concat, slice, pad, gather and scatter_add (and their forms
// on a table shard, gather_shard_rows and scatter_add_shard_rows). Every box copy
// is one strided_copy launch over StridedIndex views.
#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/transfer.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

namespace {

// Copies `src` whole into the box of `dst` at `begin`.
void copy_into(const Tensor& src, Tensor& dst, const std::vector<int64_t>& begin, const char* op) {
  if (src.num_elements() == 0) return;
  StridedIndex to = contiguous(src.shape(), op);
  const std::vector<int64_t> ds = strides_of(dst.shape());
  for (int d = 0; d < to.rank; ++d) {
    to.strides[d] = ds[static_cast<size_t>(d)];
    to.base += begin[static_cast<size_t>(d)] * ds[static_cast<size_t>(d)];
  }
  cuda_launch::strided_copy(static_cast<int>(dtype_size(src.dtype())), src.raw_data(),
                            contiguous(src.shape(), op), dst.raw_data(), to, src.num_elements(),
                            stream_of(src, op));
}

struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};

Rows rows_around(const Shape& shape, int64_t axis) {
  Rows r;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const int64_t s = shape[static_cast<size_t>(d)];
    if (d < axis) r.outer *= s;
    if (d == axis) r.n = s;
    if (d > axis) r.inner *= s;
  }
  return r;
}

[[noreturn]] void throw_bad_index(const char* op, const Tensor& indices, int64_t position,
                                  int64_t size) {
  int64_t value = 0;
  const size_t esize = dtype_size(indices.dtype());
  cuda::copy_to_host(&value, static_cast<const char*>(indices.raw_data()) + position * esize, esize,
                     indices.device());
  if (esize == 4) value = static_cast<int32_t>(value);
  throw_error<InvalidArgumentError>(op, "index {} at position {} is outside [0, {})", value,
                                    position, size);
}

}  // namespace

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  const char* op = "transpose";  // checked by the front: checks::transpose
  DTENSOR_CHECK(static_cast<int64_t>(perm.size()) == x.rank());
  const Shape shape = checks::transposed_shape(x.shape(), perm);
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  StridedIndex from = contiguous(shape, op);
  const std::vector<int64_t> xs = strides_of(x.shape());
  for (size_t i = 0; i < perm.size(); ++i) from.strides[i] = xs[static_cast<size_t>(perm[i])];
  cuda_launch::strided_copy(static_cast<int>(dtype_size(x.dtype())), x.raw_data(), from,
                            y.raw_data(), contiguous(shape, op), y.num_elements(),
                            stream_of(x, op));
  return y;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  const char* op = "concat";  // checked by the front: checks::concat
  DTENSOR_CHECK(!xs.empty());
  const Tensor& first = xs.front();
  const int64_t ax = normalize_axis(op, axis, first);
  Shape shape = first.shape();
  shape[static_cast<size_t>(ax)] = 0;
  for (const Tensor& x : xs) shape[static_cast<size_t>(ax)] += x.shape()[static_cast<size_t>(ax)];
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> begin(shape.size(), 0);
  for (const Tensor& x : xs) {
    copy_into(x, out, begin, op);
    begin[static_cast<size_t>(ax)] += x.shape()[static_cast<size_t>(ax)];
  }
  return out;
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  const char* op = "slice";  // checked by the front: checks::slice
  DTENSOR_CHECK(static_cast<int64_t>(begin.size()) == x.rank());
  const Shape extent = checks::slice_extent(x.shape(), begin, size);
  Tensor y = Tensor::empty(extent, x.dtype(), x.device());
  if (y.num_elements() == 0) return y;
  StridedIndex from = contiguous(extent, op);
  const std::vector<int64_t> xs = strides_of(x.shape());
  for (size_t d = 0; d < extent.size(); ++d) {
    from.strides[d] = xs[d];
    from.base += begin[d] * xs[d];
  }
  cuda_launch::strided_copy(static_cast<int>(dtype_size(x.dtype())), x.raw_data(), from,
                            y.raw_data(), contiguous(extent, op), y.num_elements(),
                            stream_of(x, op));
  return y;
}

Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
           double value) {
  const char* op = "pad";  // checked by the front: checks::pad
  DTENSOR_CHECK(static_cast<int64_t>(paddings.size()) == x.rank());
  Shape shape = x.shape();
  std::vector<int64_t> begin(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    shape[d] += paddings[d].first + paddings[d].second;
    begin[d] = paddings[d].first;
  }
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  cuda_launch::fill(code(x.dtype()), y.raw_data(), y.num_elements(), value, stream_of(x, op));
  copy_into(x, y, begin, op);
  return y;
}

Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  const char* op = "gather";  // checked by the front: checks::gather
  const int64_t ax = normalize_axis(op, axis, params);
  const Rows r = rows_around(params.shape(), ax);
  const Shape shape = checks::gathered_shape(params.shape(), indices.shape(), ax);
  Tensor out = Tensor::empty(shape, params.dtype(), params.device());
  Tensor bad = make_flag(params);
  cuda_launch::gather(static_cast<int>(dtype_size(params.dtype())), params.raw_data(), r.outer, r.n,
                      r.inner, code(indices.dtype()), indices.raw_data(), indices.num_elements(),
                      out.raw_data(), static_cast<int64_t*>(bad.raw_data()), stream_of(params, op));
  const int64_t position = read_flag(static_cast<const int64_t*>(bad.raw_data()), params);
  if (position >= 0) throw_bad_index(op, indices, position, r.n);
  return out;
}

Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis) {
  const char* op = "scatter_add";  // checked by the front: checks::scatter_add
  DTENSOR_CHECK(!shape.empty());
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
  const Rows r = rows_around(shape, ax);
  Tensor out = Tensor::empty(shape, updates.dtype(), updates.device());
  Tensor bad = make_flag(updates);
  cuda_launch::scatter_add(code(updates.dtype()), updates.raw_data(), r.outer, r.n, r.inner,
                           code(indices.dtype()), indices.raw_data(), indices.num_elements(),
                           out.raw_data(), static_cast<int64_t*>(bad.raw_data()),
                           stream_of(updates, op));
  const int64_t position = read_flag(static_cast<const int64_t*>(bad.raw_data()), updates);
  if (position >= 0) throw_bad_index(op, indices, position, r.n);
  return out;
}

Tensor gather_shard_rows(const Tensor& params, const Tensor& indices, const Tensor& shard,
                         int64_t vocab) {
  const char* op = "gather";  // checked by the front: checks::gather_shard_rows
  const Rows r = rows_around(params.shape(), 0);
  Tensor out = Tensor::empty(checks::gathered_shape(params.shape(), indices.shape(), 0),
                             params.dtype(), params.device());
  if (out.num_elements() == 0) return out;
  Tensor bad = make_flag(params);
  cuda_launch::gather(static_cast<int>(dtype_size(params.dtype())), params.raw_data(), r.outer, r.n,
                      r.inner, code(indices.dtype()), indices.raw_data(), indices.num_elements(),
                      out.raw_data(), static_cast<int64_t*>(bad.raw_data()), stream_of(params, op),
                      static_cast<const int64_t*>(shard.raw_data()), vocab);
  const int64_t position = read_flag(static_cast<const int64_t*>(bad.raw_data()), params);
  if (position >= 0) throw_bad_index(op, indices, position, vocab);
  return out;
}

Tensor scatter_add_shard_rows(const Tensor& indices, const Tensor& updates, const Tensor& shard,
                              int64_t chunk_rows) {
  const char* op = "scatter_add";      // checked by the front: checks::scatter_add_shard_rows
  int64_t first_and_rows[2] = {0, 0};  // the output's shape needs the row count on the host
  cuda::copy_to_host(first_and_rows, shard.raw_data(), sizeof(first_and_rows), shard.device());
  Shape shape = {first_and_rows[1]};
  shape.insert(shape.end(), updates.shape().begin() + indices.rank(), updates.shape().end());
  const Rows r = rows_around(shape, 0);
  Tensor out = Tensor::empty(shape, updates.dtype(), updates.device());
  const int64_t lead = indices.rank() > 0 ? indices.dim(0) : 1;
  const int64_t per_chunk =
      chunk_rows == 0 || lead == 0 ? 0 : chunk_rows * (indices.num_elements() / lead);
  // With no ids the launch sums nothing: every element is written as zero.
  cuda_launch::scatter_add(code(updates.dtype()), updates.raw_data(), r.outer, r.n, r.inner,
                           code(indices.dtype()), indices.raw_data(), indices.num_elements(),
                           out.raw_data(), nullptr, stream_of(updates, op),
                           static_cast<const int64_t*>(shard.raw_data()), per_chunk);
  return out;
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_shape_ops_kernels(Table& table) {
  table.transpose = transpose;
  table.concat = concat;
  table.slice = slice;
  table.pad = pad;
  table.gather = gather;
  table.scatter_add = scatter_add;
  table.gather_shard_rows = gather_shard_rows;
  table.scatter_add_shard_rows = scatter_add_shard_rows;
}

}  // namespace dtensor::kernels::gpu
