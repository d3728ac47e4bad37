// Boxes: rectangular regions of a global tensor (first index and extent per dim), and copies
// between row-major arrays that hold different boxes of the same tensor. The geometry under
// restoring a shard saved in one layout into the shards of another.
//
// Pure functions: thread-safe; concurrent copies must write disjoint regions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/shape.h"

namespace dtensor::checkpoint_internal {

struct Box {
  std::vector<int64_t> offset;
  Shape shape;

  int64_t num_elements() const { return dtensor::num_elements(shape); }
  bool empty() const { return num_elements() == 0; }
  friend bool operator==(const Box& a, const Box& b) {
    return a.offset == b.offset && a.shape == b.shape;
  }
  friend bool operator<(const Box& a, const Box& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.shape < b.shape;
  }
};

// The common part of two boxes of one rank, or nullopt if it holds no element.
std::optional<Box> intersect(const Box& a, const Box& b);

// True if `inner` lies inside `outer`.
bool contains(const Box& outer, const Box& inner);

// Element index, in `box`'s row-major array, of the global position `point` (inside the box).
uint64_t linear_index(const Box& box, const std::vector<int64_t>& point);

// [first, last + 1) element indices that `region` (inside `box`) spans in `box`'s row-major
// array. Empty regions give {0, 0}.
std::pair<uint64_t, uint64_t> covering_range(const Box& box, const Box& region);

// True if `region` occupies one contiguous run of `box`'s row-major array.
bool is_contiguous_in(const Box& box, const Box& region);

// Copies `region` from the row-major array of `src_box` to that of `dst_box` (both must contain
// it). `src` points at element `src_first` of the source array (a partial buffer holding its
// elements from there on); `dst` at element 0 of the destination array.
void copy_region(const char* src, const Box& src_box, uint64_t src_first, char* dst,
                 const Box& dst_box, const Box& region, size_t element_size);

}  // namespace dtensor::checkpoint_internal
