// Stateless, counter-based random numbers indexed by global element position (docs/design.md §2).
//
// Contract: the value of every element depends only on the RandomSpec, the element's row-major
// linear index g in the global tensor and the dtype. So filling a global tensor in one piece, or
// shard by shard on any mesh and layout, gives the same values bit for bit, and a run on 8 devices
// draws exactly what a run on 1 device draws.
//
// Counters: Philox4x32-10 with key {lo32(seed), hi32(seed)}. Draws that need a whole Philox output
// (f64, i64, normal, truncated normal) use counter {lo32(g), hi32(g), 0, retry}; draws that need
// one 32-bit word (uniform f32, bf16, i32) take word g % 4 of counter {lo32(g/4), hi32(g/4), 1, 0},
// so one Philox call serves four neighbouring elements. Truncated normal re-draws a value beyond
// 2 stddev by bumping `retry` (TensorFlow semantics), which keeps it a function of g alone.
//
// Thread-safety: every function here is pure (no global state). Concurrent calls are safe as long
// as they write to different shards.
//
// The arguments are checked here; the element loop runs behind the kernel front
// (runtime/element_loops.h: fill_random), on the device of the shard.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/random_spec.h"
#include "runtime/shape.h"
#include "runtime/tensor.h"

namespace dtensor {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Fills `shard` with the values that the elements of a tensor of shape `global_shape` take at
// global positions `offset + local index` (row-major; shard.shape() is the shard's shape, `offset`
// has one entry per dim).
//
// Uniform: floats (f32, f64, bf16) in [a, b), exactly (never b itself, also after rounding to the
// dtype); integers (i32, i64) in [a, b), where a and b must be integers. Normal: mean a, stddev b
// (Box-Muller). Truncated normal: normal with values beyond 2 stddev re-drawn. bf16 values are the
// f32 computation rounded.
//
// Throws, with messages starting "[random_uniform]", "[random_normal]" or "[truncated_normal]":
//   DTypeError for a dtype the distribution does not support (bool; integers unless uniform);
//   ShapeError if the ranks differ or the shard does not lie inside the global shape;
//   InvalidArgumentError unless a < b (uniform) or stddev b > 0, for finite values representable
//   in the dtype.
void fill_random_shard(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                       const RandomSpec& spec);

}  // namespace dtensor
