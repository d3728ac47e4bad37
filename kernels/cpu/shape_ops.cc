// Data movement: transpose, concat, slice and pad. These only move elements, so they work on
// every dtype through unsigned integer types of the element's size.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/internal.h"
#include "runtime/block.h"

namespace dtensor::kernels::cpu {
namespace {

struct Dim {
  int64_t size;
  int64_t in_stride;
  int64_t out_stride;
};

// Calls fn(in_offset, out_offset) for every index of `dims` (row-major, last fastest).
template <typename Fn>
void for_each_offset(const std::vector<Dim>& dims, Fn&& fn) {
  int64_t total = 1;
  for (const Dim& d : dims) total *= d.size;
  std::vector<int64_t> index(dims.size(), 0);
  int64_t in = 0, out = 0;
  for (int64_t step = 0; step < total; ++step) {
    fn(in, out);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d].size) {
        in += dims[d].in_stride;
        out += dims[d].out_stride;
        break;
      }
      index[d] = 0;
      in -= dims[d].in_stride * (dims[d].size - 1);
      out -= dims[d].out_stride * (dims[d].size - 1);
    }
  }
}

// The 2-D core of a transpose: out[a * out_stride + b] = in[a + b * in_stride], in square tiles
// so that both the reads and the writes stay within a few cache lines.
template <typename U>
void transpose_tile(const U* __restrict in, U* __restrict out, int64_t rows_a, int64_t cols_b,
                    int64_t in_stride, int64_t out_stride) {
  constexpr int64_t kTile = 8;
  for (int64_t a0 = 0; a0 < rows_a; a0 += kTile) {
    const int64_t a1 = std::min(rows_a, a0 + kTile);
    for (int64_t b0 = 0; b0 < cols_b; b0 += kTile) {
      const int64_t b1 = std::min(cols_b, b0 + kTile);
      for (int64_t a = a0; a < a1; ++a) {
        for (int64_t b = b0; b < b1; ++b) out[a * out_stride + b] = in[a + b * in_stride];
      }
    }
  }
}

}  // namespace

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  DTENSOR_CHECK(static_cast<int64_t>(perm.size()) == x.rank());  // checks::transpose
  const Shape out_shape = checks::transposed_shape(x.shape(), perm);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  if (out.num_elements() == 0) return out;
  const std::vector<int64_t> in_strides = row_major_strides(x.shape());
  // Output dims with their input strides; size-1 dims dropped, neighbours that are also
  // neighbours in the input merged.
  std::vector<Dim> dims;
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t size = out_shape[i];
    const int64_t stride = in_strides[static_cast<size_t>(perm[i])];
    if (size == 1) continue;
    if (!dims.empty() && dims.back().in_stride == stride * size) {
      dims.back().size *= size;
      dims.back().in_stride = stride;
    } else {
      dims.push_back({size, stride, 0});
    }
  }
  int64_t stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    dims[i].out_stride = stride;
    stride *= dims[i].size;
  }
  const size_t esize = dtype_size(x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  if (dims.empty() || dims.back().in_stride == 1) {
    // The innermost dim stays innermost: copy contiguous runs.
    const int64_t run = dims.empty() ? 1 : dims.back().size;
    if (!dims.empty()) dims.pop_back();
    for_each_offset(dims, [&](int64_t in, int64_t o) {
      std::memcpy(dst + o * esize, src + in * esize, static_cast<size_t>(run) * esize);
    });
    return out;
  }
  // The input's contiguous dim (a) moved away from the end: tile it against the output's
  // contiguous dim (b), and walk the remaining dims around the tiles.
  const auto a_it =
      std::find_if(dims.begin(), dims.end(), [](const Dim& d) { return d.in_stride == 1; });
  DTENSOR_CHECK(a_it != dims.end());
  const Dim a = *a_it;
  const Dim b = dims.back();
  dims.erase(a_it);
  dims.pop_back();
  internal::visit_element_size(esize, [&](auto tag) {
    using U = decltype(tag);
    const U* in = static_cast<const U*>(x.raw_data());
    U* o = static_cast<U*>(out.raw_data());
    for_each_offset(dims, [&](int64_t in_off, int64_t out_off) {
      transpose_tile(in + in_off, o + out_off, a.size, b.size, b.in_stride, a.out_stride);
    });
  });
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  DTENSOR_CHECK(!xs.empty());  // checks::concat
  const Tensor& first = xs.front();
  const int64_t ax = internal::normalize_axis("concat", axis, first);
  Shape out_shape = first.shape();
  out_shape[static_cast<size_t>(ax)] = 0;
  for (const Tensor& x : xs) out_shape[static_cast<size_t>(ax)] += x.dim(ax);
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  if (out.num_elements() == 0) return out;
  const internal::AxisView view = internal::view_around_axis(out_shape, ax);
  const size_t esize = dtype_size(first.dtype());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < view.outer; ++o) {
    for (const Tensor& x : xs) {
      const size_t run = static_cast<size_t>(x.dim(ax) * view.inner) * esize;
      std::memcpy(dst, static_cast<const char*>(x.raw_data()) + o * run, run);
      dst += run;
    }
  }
  return out;
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size) {
  DTENSOR_CHECK(static_cast<int64_t>(begin.size()) == x.rank());  // checks::slice
  const Shape extent = checks::slice_extent(x.shape(), begin, size);
  return slice_box(x, begin, extent);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings,
           double value) {
  DTENSOR_CHECK(static_cast<int64_t>(paddings.size()) == x.rank());  // checks::pad
  Shape out_shape = x.shape();
  std::vector<int64_t> begin(paddings.size());
  for (size_t d = 0; d < paddings.size(); ++d) {
    out_shape[d] += paddings[d].first + paddings[d].second;
    begin[d] = paddings[d].first;
  }
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(out.data<T>(), out.num_elements(), internal::convert<T>(value));
  });
  copy_box(x, std::vector<int64_t>(paddings.size(), 0), out, begin, x.shape());
  return out;
}

}  // namespace dtensor::kernels::cpu
