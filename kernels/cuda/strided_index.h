// StridedIndex: the one piece of index arithmetic the CUDA kernels share. It views a buffer as a
// row-major walk over `dims`: the linear index i of the walk (0 <= i < product(dims)) is split
// into coordinates, and the element read or written is base + sum(coord[d] * strides[d]). A stride
// of 0 broadcasts a dim; permuted strides transpose; a base offset and the source's strides cut a
// box (slice, concat, pad, relayout blocks). Plain value, passed to kernels by value.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define DTENSOR_HOST_DEVICE __host__ __device__
#else
#define DTENSOR_HOST_DEVICE
#endif

namespace dtensor::kernels::cuda_launch {

constexpr int kMaxRank = 8;

struct StridedIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int64_t base = 0;

  DTENSOR_HOST_DEVICE int64_t offset(int64_t i) const {
    int64_t off = base;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t c = i % dims[d];
      i /= dims[d];
      off += c * strides[d];
    }
    return off;
  }
};

}  // namespace dtensor::kernels::cuda_launch
