// Moving tensors between host memory and emulated GPU memory, with the API of the CUDA runtime's
// transfers (runtime/cuda/transfer.h): the same functions, in namespace emulated.
//
// to_device copies a host tensor (or a GPU tensor of another emulated GPU: a peer copy) into a new
// tensor on `device`; to_host copies a GPU tensor into a new host tensor tagged CPU:0. A tensor
// already in the requested place is returned as it is (to_device onto a logical device of the same
// physical GPU retags it, moving no bytes). Each copy opens the opaque buffers it touches for its
// length only (runtime/emulated/opaque_memory.h) and counts as a launch on the streams involved.
//
// Thread-safety: any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/tensor.h"

namespace dtensor::emulated {

// Throw UnimplementedError when the emulated GPU is off; InvalidArgumentError when `device` is not
// a GPU device.
Tensor to_device(const Tensor& tensor, const Device& device);
Tensor to_host(const Tensor& tensor);

// Copies between host memory and emulated GPU memory made by this process so far: to_device of a
// host tensor and to_host of a GPU one (peer copies and retags are not counted). Tests count
// with it how many host reads and writes a path above the kernel front makes.
int64_t host_transfers();

// Raw copies of `nbytes` between host memory and the memory of `device`.
void copy_to_device(void* dst, const void* host_src, size_t nbytes, const Device& device);
void copy_to_host(void* host_dst, const void* src, size_t nbytes, const Device& device);

}  // namespace dtensor::emulated
