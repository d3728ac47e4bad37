// Shared host-side helpers of the CUDA kernel front (kernels/cuda/*.cc): the stream of a
// tensor's device, StridedIndex views of shapes, bf16 <-> f32 round trips, and the common errors.
// Internal to //kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/checks.h"
#include "kernels/cuda/launch.h"
#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::cuda_internal {

using cuda_launch::StridedIndex;

// Makes the tensor's GPU current and returns its stream (CudaError naming `op` without a GPU).
cudaStream_t stream_of(const Tensor& t, const char* op);
// The dtype as the launchers take it.
inline int code(DType dtype) { return static_cast<int>(dtype); }

// Row-major walk over `shape` reading a contiguous buffer of the same shape.
StridedIndex contiguous(const Shape& shape, const char* op);
// Walk over `out` reading `in`, which broadcasts to it (NumPy rules, checked by the caller).
StridedIndex broadcast(const Shape& in, const Shape& out, const char* op);
// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& shape);

// "f32[2,3]" (kernels/kernel_types.h).
using kernels::describe;
// The shared argument checks (kernels/checks.h).
using checks::broadcast_shapes;
using checks::check_index_dtype;
using checks::normalize_axis;
using checks::throw_unsupported;
using checks::unary_supports;

// bf16 tensors computed through f32, as the CPU kernels do.
Tensor to_f32(const Tensor& x);
Tensor to_bf16(const Tensor& x);

// Reads one int64 the kernels wrote (an error flag: the first bad position, -1 for none); waits
// for the stream.
int64_t read_flag(const int64_t* device_flag, const Tensor& on);
// A device int64 set to -1, on the tensor's device (for read_flag).
Tensor make_flag(const Tensor& on);

}  // namespace dtensor::kernels::cuda_internal
