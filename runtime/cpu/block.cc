// Block copies and elementwise reductions in host memory: the CPU half of the block loops of
// runtime/element_loops.h (runtime/block.h checks the arguments).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/element_loops.h"
#include "runtime/thread_pool.h"

namespace dtensor::kernels::cpu {
namespace {

// a + b; integers wrap (two's complement) instead of overflowing, which is undefined for signed
// types. Single-device sums accumulate integers in i64 and truncate, so a wrapped sum of partial
// terms gives the same value.
template <typename T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}

template <typename T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return add(a, b);
    case ReduceOp::kMax:
      return max_propagating_nan(a, b);
    case ReduceOp::kMin:
      return min_propagating_nan(a, b);
  }
  return a;
}

template <typename T>
void reduce_typed(T* dst, const T* src, ReduceOp op, int64_t n) {
  switch (op) {
    case ReduceOp::kSum:
      for (int64_t i = 0; i < n; ++i) dst[i] = add(dst[i], src[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) dst[i] = max_propagating_nan(dst[i], src[i]);
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) dst[i] = min_propagating_nan(dst[i], src[i]);
      break;
  }
}

void reduce_bool(bool* dst, const bool* src, ReduceOp op, int64_t n) {
  if (op == ReduceOp::kMin) {
    for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] && src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] || src[i];
  }
}

void reduce_bf16(BFloat16* dst, const BFloat16* src, ReduceOp op, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = BFloat16(combine(static_cast<float>(dst[i]), static_cast<float>(src[i]), op));
  }
}

// d[i] = op(d[i], s[i]) for n elements of `dtype`.
void reduce_elements(DType dtype, void* dst, const void* src, ReduceOp op, int64_t n) {
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* d = static_cast<T*>(dst);
    const T* s = static_cast<const T*>(src);
    if constexpr (std::is_same_v<T, bool>) {
      reduce_bool(d, s, op, n);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      reduce_bf16(d, s, op, n);
    } else {
      reduce_typed(d, s, op, n);
    }
  });
}

// dst = reduction of elements [begin, begin + n) of inputs [lo, hi) in the pairwise order;
// `scratch` holds one block per level of the tree below this one.
void reduce_tree(char* dst, const std::vector<Tensor>& inputs, size_t lo, size_t hi, int64_t begin,
                 int64_t n, ReduceOp op, char* scratch, size_t block_bytes) {
  const DType dtype = inputs[lo].dtype();
  const size_t esize = dtype_size(dtype);
  auto at = [&](size_t i) {
    return static_cast<const char*>(inputs[i].raw_data()) + static_cast<size_t>(begin) * esize;
  };
  if (hi - lo == 1) {
    std::memcpy(dst, at(lo), static_cast<size_t>(n) * esize);
    return;
  }
  const size_t mid = lo + (hi - lo + 1) / 2;
  reduce_tree(dst, inputs, lo, mid, begin, n, op, scratch, block_bytes);
  if (hi - mid == 1) {
    reduce_elements(dtype, dst, at(mid), op, n);
  } else {
    reduce_tree(scratch, inputs, mid, hi, begin, n, op, scratch + block_bytes, block_bytes);
    reduce_elements(dtype, dst, scratch, op, n);
  }
}

}  // namespace

void copy_box_elements(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                       const std::vector<int64_t>& dst_begin, const Shape& extent) {
  if (num_elements(extent) == 0) return;
  const size_t esize = dtype_size(src.dtype());
  const int64_t rank = src.rank();
  if (rank == 0) {
    std::memcpy(dst.raw_data(), src.raw_data(), esize);
    return;
  }
  // Fold trailing dims that both tensors hold whole into one contiguous run.
  int64_t inner = rank - 1;
  int64_t run = extent[inner];
  while (inner > 0 && extent[inner] == src.shape()[inner] && extent[inner] == dst.shape()[inner]) {
    --inner;
    run *= extent[inner];
  }
  const auto src_strides = row_major_strides(src.shape());
  const auto dst_strides = row_major_strides(dst.shape());
  const auto* s = static_cast<const char*>(src.raw_data());
  auto* d = static_cast<char*>(dst.raw_data());
  int64_t src_base = 0, dst_base = 0;
  for (int64_t i = 0; i < rank; ++i) {
    src_base += src_begin[i] * src_strides[i];
    dst_base += dst_begin[i] * dst_strides[i];
  }
  const size_t run_bytes = static_cast<size_t>(run) * esize;
  std::vector<int64_t> index(static_cast<size_t>(inner), 0);  // odometer over dims [0, inner)
  while (true) {
    int64_t so = src_base, dof = dst_base;
    for (int64_t i = 0; i < inner; ++i) {
      so += index[i] * src_strides[i];
      dof += index[i] * dst_strides[i];
    }
    std::memcpy(d + dof * esize, s + so * esize, run_bytes);
    int64_t i = inner - 1;
    for (; i >= 0; --i) {
      if (++index[i] < extent[i]) break;
      index[i] = 0;
    }
    if (i < 0) return;
  }
}

void reduce_range_elements(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin,
                           int64_t end) {
  const size_t esize = dtype_size(dst.dtype());
  reduce_elements(dst.dtype(), static_cast<char*>(dst.raw_data()) + begin * esize,
                  static_cast<const char*>(src.raw_data()) + begin * esize, op, end - begin);
}

void reduce_tensors_into(Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op) {
  const int64_t n = inputs[0].num_elements();
  const size_t esize = dtype_size(inputs[0].dtype());
  // Blocks small enough to stay in L1 while every input is folded in: each input is read once
  // and the result written once, (N+1) x bytes of memory traffic.
  const int64_t block = std::max<int64_t>(1, 16384 / static_cast<int64_t>(esize));
  const size_t block_bytes = static_cast<size_t>(block) * esize;
  size_t depth = 0;
  for (size_t k = inputs.size(); k > 1; k = (k + 1) / 2) ++depth;
  auto reduce_part = [&](int64_t begin, int64_t end) {
    std::vector<char> scratch(depth * block_bytes);
    for (int64_t b = begin; b < end; b += block) {
      const int64_t e = std::min(end, b + block);
      reduce_tree(static_cast<char*>(acc.raw_data()) + static_cast<size_t>(b) * esize, inputs, 0,
                  inputs.size(), b, e - b, op, scratch.data(), block_bytes);
    }
  };
  // Below this many bytes the reduction runs on the calling thread: waking the pool costs more.
  constexpr size_t kParallelBytes = 1 << 18;
  if (inputs[0].nbytes() < kParallelBytes) {
    reduce_part(0, n);
  } else {
    ThreadPool& pool = ThreadPool::global();
    const int64_t parts = pool.num_threads();
    pool.parallel_for(parts, [&](int64_t p) {
      ShardRange r = chunk_range(n, parts, p);
      reduce_part(r.offset, r.offset + r.size);
    });
  }
}

}  // namespace dtensor::kernels::cpu
