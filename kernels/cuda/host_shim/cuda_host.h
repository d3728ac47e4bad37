// What the CNN launchers (kernels/cuda/cnn.cu) take from CUDA, for compiling them as host C++ in
// //kernels/cuda:cnn_host_test (the first include of the generated cnn_host.cc): __global__ and
// __device__ mean nothing, a "launch" calls the kernel once as a single thread whose grid-stride
// loop covers every element, and the stream is an unused handle. Only for that test, never linked with CUDA; no GPU behaviour
// (memory spaces, concurrency, launch limits) is modelled.
#pragma once

#include <cmath>
#include <cstdint>

#define __global__
#define __device__
#define __host__

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct HostThreadIndex {
  unsigned x = 0, y = 0, z = 0;
};
// One block of one thread: DTENSOR_FOR_EACH's loop visits every index in order.
inline const HostThreadIndex blockIdx{}, threadIdx{};
inline const dim3 blockDim(1), gridDim(1);

using std::pow;
using std::sqrt;
