// Host reads of device memory above the kernel front: the one way code on the dtensor, ops and
// train floors reads values out of a shard (a flag, a scalar loss, labels that failed a check)
// or puts a host value onto a device.
//
// A shard on a GPU device lives in memory the host cannot touch: reading it through data<>() or
// raw_data() crashes (or, on a device whose memory the host can map, silently reads stale bytes).
// These functions (runtime/element_loops.h's, for this floor and above) copy through the GPU
// backend's transfer entries (kernels/gpu/gpu_kernels.h copy_to_host, copy_to_gpu) when the memory
// is not host memory, and cost nothing otherwise: a tensor already in host memory is returned as
// it is, so the CPU path keeps its cost.
//
// Meant for small tensors: a transfer waits for the device. Stateless and thread-safe.
#pragma once

#include "runtime/tensor.h"

namespace dtensor {

// `t` itself when its elements are in host memory; otherwise a new host tensor (CPU:0) holding
// them. UnimplementedError "[copy_to_host] has no GPU kernel in this build" without a GPU backend.
Tensor host_readable(const Tensor& t);

// `host` (a tensor in host memory) as a tensor on `device`: `host` retagged for a CPU device (no
// copy), a copy through the GPU backend for any other. InternalError if `host` is not in host
// memory.
Tensor on_device(const Tensor& host, const Device& device);

}  // namespace dtensor
