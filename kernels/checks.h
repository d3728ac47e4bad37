// The argument checks of the kernel front, written once for every backend: the front
// (kernels_inl.h) runs the ones a kernel's arguments need before it dispatches, and the backends
// (cpu/, cuda/) share the helpers below instead of each writing its own copy. Each throws the
// contract's error (kernels.h: "[op] ..." naming shapes and dtypes). Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/conv_params.h"
#include "kernels/kernel_types.h"
#include "runtime/tensor.h"

namespace dtensor::kernels::checks {

// DTypeError "[op] unsupported dtype <d>: <t>".
[[noreturn]] void throw_unsupported(const char* op, const Tensor& t);

// DTypeError "[op] <what> must be i32 or i64, got <t>" unless t is i32 or i64.
void check_index_dtype(const char* op, const Tensor& t, const char* what);

// `axis` in [-rank, rank) mapped to [0, rank); InvalidArgumentError "[op] axis 3 is out of range
// for f32[2,3]" otherwise.
int64_t normalize_axis(const char* op, int64_t axis, const Tensor& x);

// The NumPy broadcast of a and b in *out; false if they are incompatible.
bool try_broadcast_shapes(const Shape& a, const Shape& b, Shape* out);
// The same, or ShapeError "[op] incompatible shapes for broadcasting: [2,3] vs [4]".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// True if unary(op, x) accepts x's dtype: floats for every op; i32/i64 for neg, abs, square, relu,
// relu_grad and sign; never bool.
bool unary_supports(UnaryOp op, DType dtype);

// sparse_softmax_cross_entropy's arguments: float logits of rank >= 1 and i32/i64 labels of the
// logits' shape without the last dim. (Label values are data: the backends check them.)
void cross_entropy(const char* op, const Tensor& logits, const Tensor& labels);
// The same, and grad of the labels' shape and the logits' dtype.
// attention's arguments: q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] of rank >= 3 with one
// batch shape, one dtype, f32 or f64 (DTypeError "[op] unsupported dtype ..." otherwise), Tq == Tk
// when causal (ShapeError "[op] q f32[..] k ... v ... must be ..." otherwise).
void attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
// attention_grad's: attention's, and dy and y of q's shape with v's last dim.
void attention_grad(const char* op, const Tensor& dy, const Tensor& q, const Tensor& k,
                    const Tensor& v, const Tensor& y, bool causal);

void cross_entropy_grad(const char* op, const Tensor& logits, const Tensor& labels,
                        const Tensor& grad);

// dense's bias, given the product's shape `out` and dtype `out_dtype` (the backends compute them,
// kernel_types.h matmul_dims): null, or of the output's dtype (DTypeError) and shape [out.back()]
// (ShapeError).
void dense_bias(const Tensor* bias, const Shape& out, DType out_dtype);

// one_hot's: i32/i64 indices (DTypeError) and depth >= 0 (InvalidArgumentError).
void one_hot(const Tensor& indices, int64_t depth);

// ---- Data movement: the shapes of each call (index values are data: the backends check them) ----

// perm is a permutation of x's axes (InvalidArgumentError).
void transpose(const Tensor& x, const std::vector<int64_t>& perm);
// At least one tensor, not scalars, an axis in range, one dtype, dims equal outside the axis.
void concat(const std::vector<Tensor>& xs, int64_t axis);
// begin and size of x's rank, and the box (a size of -1: to the end) inside x.
void slice(const Tensor& x, const std::vector<int64_t>& begin, const Shape& size);
// One non-negative (before, after) pair per dim of x.
void pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& paddings);
// params of rank >= 1, i32/i64 indices, an axis in range.
void gather(const Tensor& params, const Tensor& indices, int64_t axis);
// A valid shape of rank >= 1, an axis in range, i32/i64 indices, numeric updates of
// gathered_shape(shape, indices, axis).
void scatter_add(const Shape& shape, const Tensor& indices, const Tensor& updates, int64_t axis);
// gather's checks along axis 0, an i64 shard of 2 elements, vocab >= 0.
void gather_shard_rows(const Tensor& params, const Tensor& indices, const Tensor& shard,
                       int64_t vocab);
// i32/i64 indices, numeric updates of indices.shape + [...], an i64 shard of 2 elements;
// chunk_rows >= 0, and > 0 only for f32/f64 updates.
void scatter_add_shard_rows(const Tensor& indices, const Tensor& updates, const Tensor& shard,
                            int64_t chunk_rows);

// ---- CNN ops: the one place the kernels check convolution geometry ----

// x [n,h,w,c] * w [kh,kw,c/groups,o] -> y [n,oh,ow,o] under p: strides, dilations and groups >= 1,
// paddings >= 0 (InvalidArgumentError), rank-4 shapes whose channels split into the groups
// (ShapeError), no int64 overflow (InvalidArgumentError) and a window that fits the padded input
// (ShapeError). Returns the extents; backends call it again for them.
ConvGeometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p);
// The same, and x and w of one float dtype (DTypeError).
void conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p);
// conv2d's checks, and a bias of shape [o] in the output's dtype.
void conv2d_bias(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p);
// The same with dy of the output's shape (ShapeError), for the two gradients.
void conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                           const Conv2dParams& p);
void conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                            const Conv2dParams& p);

// Shape arithmetic the backends share once the checks passed:
// x's axes in the order of perm.
Shape transposed_shape(const Shape& x, const std::vector<int64_t>& perm);
// The extent of slice's box, a size of -1 resolved to the end of its dim.
Shape slice_extent(const Shape& x, const std::vector<int64_t>& begin, const Shape& size);
// shape[:axis] + indices + shape[axis+1:] (axis in [0, rank)).
Shape gathered_shape(const Shape& shape, const Shape& indices, int64_t axis);

}  // namespace dtensor::kernels::checks
