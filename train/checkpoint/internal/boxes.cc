#include "train/checkpoint/internal/boxes.h"

#include <algorithm>
#include <cstring>

namespace dtensor::checkpoint_internal {

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out;
  const size_t rank = a.shape.size();
  out.offset.resize(rank);
  out.shape.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset[d] = lo;
    out.shape[d] = hi - lo;
  }
  return out;
}

bool contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.shape.size(); ++d) {
    if (inner.offset[d] < outer.offset[d] ||
        inner.offset[d] + inner.shape[d] > outer.offset[d] + outer.shape[d]) {
      return false;
    }
  }
  return true;
}

uint64_t linear_index(const Box& box, const std::vector<int64_t>& point) {
  uint64_t index = 0;
  for (size_t d = 0; d < box.shape.size(); ++d) {
    index = index * static_cast<uint64_t>(box.shape[d]) +
            static_cast<uint64_t>(point[d] - box.offset[d]);
  }
  return index;
}

std::pair<uint64_t, uint64_t> covering_range(const Box& box, const Box& region) {
  if (region.empty()) return {0, 0};
  std::vector<int64_t> last(region.offset.size());
  for (size_t d = 0; d < last.size(); ++d) last[d] = region.offset[d] + region.shape[d] - 1;
  return {linear_index(box, region.offset), linear_index(box, last) + 1};
}

bool is_contiguous_in(const Box& box, const Box& region) {
  // Contiguous iff, past the first dim where the region is shorter than the box, it spans every
  // later dim fully and every earlier dim has extent one.
  const size_t rank = box.shape.size();
  size_t d = 0;
  while (d < rank && region.shape[d] == 1) ++d;
  if (d < rank) ++d;  // the one dim that may be partial
  for (; d < rank; ++d) {
    if (region.shape[d] != box.shape[d]) return false;
  }
  return true;
}

void copy_region(const char* src, const Box& src_box, uint64_t src_first, char* dst,
                 const Box& dst_box, const Box& region, size_t element_size) {
  if (region.empty()) return;
  const int rank = static_cast<int>(region.shape.size());
  // Trailing dims that all three boxes span fully form one contiguous run; so does the partial
  // dim just before them.
  int inner = rank;
  size_t run = element_size;
  while (inner > 0 && region.shape[inner - 1] == src_box.shape[inner - 1] &&
         region.shape[inner - 1] == dst_box.shape[inner - 1]) {
    run *= static_cast<size_t>(region.shape[inner - 1]);
    --inner;
  }
  if (inner > 0) {
    run *= static_cast<size_t>(region.shape[inner - 1]);
    --inner;
  }
  // Strides (bytes) of the outer dims [0, inner) in both arrays.
  std::vector<uint64_t> src_stride(rank + 1, element_size), dst_stride(rank + 1, element_size);
  for (int d = rank - 1; d >= 0; --d) {
    src_stride[d] = src_stride[d + 1] * static_cast<uint64_t>(src_box.shape[d]);
    dst_stride[d] = dst_stride[d + 1] * static_cast<uint64_t>(dst_box.shape[d]);
  }
  const uint64_t src_start =
      linear_index(src_box, region.offset) * element_size - src_first * element_size;
  const uint64_t dst_start = linear_index(dst_box, region.offset) * element_size;
  std::vector<int64_t> index(static_cast<size_t>(inner), 0);
  while (true) {
    uint64_t s = src_start, t = dst_start;
    for (int d = 0; d < inner; ++d) {
      s += static_cast<uint64_t>(index[d]) * src_stride[d + 1];
      t += static_cast<uint64_t>(index[d]) * dst_stride[d + 1];
    }
    std::memcpy(dst + t, src + s, run);
    int d = inner - 1;
    while (d >= 0 && ++index[d] == region.shape[d]) index[d--] = 0;
    if (d < 0) break;
  }
}

}  // namespace dtensor::checkpoint_internal
