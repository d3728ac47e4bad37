// The runtime's own element loops: the block copies and reductions under relayout and the
// collectives (runtime/block.h), constant and Philox random fills (creation, runtime/random.h).
//
// Declared here, on the runtime floor, so that runtime code can call them; defined on the kernels
// floor by //kernels:memory (kernels/memory.cc), which //runtime:block and //runtime:random link.
// Each function dispatches with a switch on the device type of its tensors to the CPU
// implementation (kernels/cpu/cpu_kernels.h) or the GPU one (the table of kernels/gpu/gpu_kernels.h;
// UnimplementedError "[fill] has no GPU kernel in this build" without CUDA). //kernels:memory
// depends on nothing above //runtime:tensor (and the thread pool), so that the runtime can link it.
//
// The callers validate: these functions check only that their tensors share one device type
// (InvalidArgumentError naming the caller's function otherwise). Stateless and thread-safe; callers
// must not write one destination region from two threads.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels {

// Copies the box `extent` at `src_begin` of `src` to `dst_begin` of `dst` (checked by the caller:
// runtime/block.h copy_box).
void copy_box_elements(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                       const std::vector<int64_t>& dst_begin, const Shape& extent);
// dst[i] = op(dst[i], src[i]) over elements [begin, end) (runtime/block.h reduce_range).
void reduce_range_elements(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin, int64_t end);
// acc = the pairwise reduction of `inputs` (runtime/block.h reduce_tensors), split over the
// thread pool when large; acc has the inputs' shape and dtype.
void reduce_tensors_into(Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op);
// Every element of `dst` set to `value` converted to its dtype (checked by the caller).
void fill_value(Tensor& dst, double value);
// The Philox values of `spec` at the global positions of `shard` (runtime/random.h
// fill_random_shard, which checks the arguments).
void fill_random(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                 const RandomSpec& spec);

// Philox4x32-10 of one counter: host arithmetic, the same on every device.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace dtensor::kernels
