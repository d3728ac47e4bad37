// Moving tensors between host memory and GPU memory.
//
// to_device copies a host tensor into a new tensor on a GPU device; to_host copies a GPU tensor
// into a new host tensor tagged CPU:0 (and waits for it). Both go through a pinned staging buffer
// per physical GPU, so the DMA engine reads page-locked memory and the copy does not need the
// driver's own pageable-memory path; the host waits for each chunk before refilling the buffer.
//
// A tensor already in the requested memory space is returned as it is (to_device of a GPU
// tensor on the same physical GPU is retagged, which moves no bytes). to_device of a GPU tensor on
// another physical GPU is a peer copy ordered by events between the two GPUs' streams: it follows
// the work that wrote the source, the source is not freed or overwritten before it completes,
// and the host does not wait for it.
//
// Thread-safety: any thread; the staging buffer of a GPU is locked for the length of one copy.
#pragma once

#include "runtime/tensor.h"

namespace dtensor::cuda {

// Throws CudaError when no GPU is visible; InvalidArgumentError if `device` is not a GPU device.
Tensor to_device(const Tensor& host, const Device& device);
Tensor to_host(const Tensor& tensor);

// Raw copies of `nbytes` between host memory and the memory of `device`, through the staging
// buffer; the host copy has finished when they return.
void copy_to_device(void* dst, const void* host_src, size_t nbytes, const Device& device);
void copy_to_host(void* host_dst, const void* src, size_t nbytes, const Device& device);

}  // namespace dtensor::cuda
