// The GPU implementations of the kernel front (kernels/kernels.h), with its contract; the
// front dispatches here for tensors on GPU devices. The first part mirrors kernels.h; then
// runtime/element_loops.h and kernels/optimizer_update.h. Shape arithmetic (broadcast_shapes),
// set_blas_threads and philox4x32_10 are host-only and have no GPU half.
//
// Which library defines these is chosen by the build (//kernels:gpu_kernels): the CUDA
// kernels in a CUDA build, and kernels/no_gpu/ otherwise, whose functions throw
// UnimplementedError.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "kernels/optimizer_update.h"
#include "runtime/random_spec.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::gpu {

Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, double alpha);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options);
void matmul_accumulate(const Tensor& a, const Tensor& b, Tensor& out, const MatmulOptions& options);
Tensor dense(const Tensor& x, const Tensor& w, const Tensor* bias,
             std::optional<UnaryOp> activation, const MatmulOptions& options);
Tensor reduce(ReduceKind kind, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdims);
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);
Tensor logsumexp(const Tensor& x, int64_t axis, bool keepdims);
Tensor softmax_shift(const Tensor& max);
Tensor sparse_softmax_cross_entropy(const Tensor& logits, const Tensor& labels);
Tensor sparse_softmax_cross_entropy_grad(const Tensor& logits, const Tensor& labels,
                                         const Tensor& grad);
Tensor one_hot(const Tensor& indices, int64_t depth, DType dtype, double on, double off);
LayerNormResult layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
LayerNormGrad layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& gamma,
                              const Tensor& mean, const Tensor& rstd);
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size);
Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis);
Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings, double value);
Tensor scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis);

// ---- runtime/element_loops.h ----
void copy_box_elements(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                       const std::vector<int64_t>& dst_begin, const Shape& extent);
void reduce_range_elements(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin, int64_t end);
void reduce_tensors_into(Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op);
void fill_value(Tensor& dst, double value);
void fill_random(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                 const RandomSpec& spec);

// ---- Host <-> GPU copies (runtime/cuda/transfer.h in a CUDA build) ----
// For device-neutral callers (examples) that move host batches onto a GPU mesh and read results
// back: a new tensor on `device` holding `host`'s elements, and a new host tensor (CPU:0) holding
// a GPU tensor's. The stub throws UnimplementedError ("built without CUDA").
Tensor copy_to_gpu(const Tensor& host, const Device& device);
Tensor copy_to_host(const Tensor& tensor);

// ---- kernels/optimizer_update.h ----
void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr);
void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov);
void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                 Tensor& var_out, Tensor& m_out, Tensor& v_out, const AdamStepParams& params);

// CNN ops (conv.cc, pool.cc, lrn.cc).
Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& params);
Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                             const Conv2dParams& params);
Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                              const Conv2dParams& params);
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_grad(const Tensor& x, const Tensor& dy, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d_grad(const Shape& x_shape, const Tensor& dy, const Pool2dParams& params);
Tensor local_response_normalization(const Tensor& x, const LrnParams& params);
Tensor local_response_normalization_grad(const Tensor& x, const Tensor& dy,
                                         const LrnParams& params);

}  // namespace dtensor::kernels::gpu
