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

// Host reads of device memory for code above the kernel front (a flag, a scalar, a collective's
// shape records): `t` itself when its elements are in host memory (no copy), else a new host
// tensor (CPU:0) through the GPU table's copy_to_host; and `host` (host memory, InternalError
// naming on_device otherwise) on `device`: retagged for a CPU device, else copied through
// copy_to_gpu. Without a GPU backend, device memory throws "[copy_to_host] has no GPU kernel in
// this build" (copy_to_gpu alike). dtensor/host_copy.h offers them above the runtime.
Tensor host_readable(const Tensor& t);
Tensor on_device(const Tensor& host, const Device& device);

// Philox4x32-10 of one counter: host arithmetic, the same on every device.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace dtensor::kernels
