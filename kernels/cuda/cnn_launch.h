// The CUDA launchers of the CNN kernels that do not go through cuDNN: direct convolution loops
// (the f64 kernels, and the fallback for any geometry cuDNN refuses), max/avg pooling and their
// gradients, and local response normalisation. Like launch.h: raw device pointers and plain
// extents (checked by the host side, kernels/cuda/conv.cc and pool.cc), one or a few kernels
// enqueued on `stream`, no synchronization. `dtype` is f32 or f64 (bf16 arrives converted to f32).
//
// Every output element is computed by one thread that gathers its inputs in the CPU kernels' order
// (kernels/cpu/conv_direct.h, pool.cc, lrn.cc): no atomics, so results are deterministic and the
// pooling and LRN results match the CPU's up to FMA contraction.
// Stateless; thread-safe.
#pragma once

#include <cstdint>

// CUDA's own declaration of the stream handle (driver_types.h), repeated so that this header needs
// no CUDA header: cnn_host_test compiles cnn.cu's kernels as host C++ without CUDA.
typedef struct CUstream_st* cudaStream_t;

namespace dtensor::kernels::cuda_launch {

// One convolution x [n,h,w,c] * w [kh,kw,cpg,o] -> y [n,oh,ow,o] (NHWC, HWIO), cpg = c / groups.
struct ConvDims {
  int64_t n, h, w, c;
  int64_t kh, kw, cpg, o;
  int64_t oh, ow, groups;
  int64_t stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left;
};

// y = conv2d(x, w); dx = its adjoint in x applied to dy; dw = its adjoint in w applied to dy.
// Accumulation in f64 for f64, f32 for f32 (the filter gradient in f64 for both, as the CPU).
void conv2d_direct(int dtype, const void* x, const void* w, void* y, const ConvDims& d,
                   cudaStream_t stream);
void conv2d_backprop_input_direct(int dtype, const void* w, const void* dy, void* dx,
                                  const ConvDims& d, cudaStream_t stream);
void conv2d_backprop_filter_direct(int dtype, const void* x, const void* dy, void* dw,
                                   const ConvDims& d, cudaStream_t stream);

// Pooling windows over x [n,h,w,c] -> y [n,oh,ow,c]; padded positions never count.
struct PoolDims {
  int64_t n, h, w, c, oh, ow;
  int64_t window_h, window_w, stride_h, stride_w, pad_top, pad_left;
};

void max_pool(int dtype, const void* x, void* y, const PoolDims& d, cudaStream_t stream);
// dx [n,h,w,c] (written whole): dy of each window to the first position holding its maximum.
void max_pool_grad(int dtype, const void* x, const void* dy, void* dx, const PoolDims& d,
                   cudaStream_t stream);
void avg_pool(int dtype, const void* x, void* y, const PoolDims& d, cudaStream_t stream);
void avg_pool_grad(int dtype, const void* dy, void* dx, const PoolDims& d, cudaStream_t stream);

// Local response normalisation over the last dim of x viewed as [rows, n] (kernels/conv_params.h
// LrnParams; `radius` already clamped to n). The gradient needs two scratch buffers of rows * n
// elements of dtype.
struct LrnDims {
  int64_t rows, n, radius;
  double bias, alpha, beta;
};
void lrn(int dtype, const void* x, void* y, const LrnDims& d, cudaStream_t stream);
void lrn_grad(int dtype, const void* x, const void* dy, void* dx, void* scratch_d,
              void* scratch_scale, const LrnDims& d, cudaStream_t stream);

}  // namespace dtensor::kernels::cuda_launch
