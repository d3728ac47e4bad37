// The elementwise part of the GPU kernel front: unary, binary, scale, where, cast, broadcast_to
// and sum_to.
#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/transfer.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

// The op codes the launchers take (launch.h) are the enums' values.
static_assert(cuda_launch::unary_op::kNeg == static_cast<int>(UnaryOp::kNeg));
static_assert(cuda_launch::unary_op::kAbs == static_cast<int>(UnaryOp::kAbs));
static_assert(cuda_launch::unary_op::kExp == static_cast<int>(UnaryOp::kExp));
static_assert(cuda_launch::unary_op::kLog == static_cast<int>(UnaryOp::kLog));
static_assert(cuda_launch::unary_op::kSqrt == static_cast<int>(UnaryOp::kSqrt));
static_assert(cuda_launch::unary_op::kRsqrt == static_cast<int>(UnaryOp::kRsqrt));
static_assert(cuda_launch::unary_op::kSquare == static_cast<int>(UnaryOp::kSquare));
static_assert(cuda_launch::unary_op::kRelu == static_cast<int>(UnaryOp::kRelu));
static_assert(cuda_launch::unary_op::kSigmoid == static_cast<int>(UnaryOp::kSigmoid));
static_assert(cuda_launch::unary_op::kTanh == static_cast<int>(UnaryOp::kTanh));
static_assert(cuda_launch::unary_op::kGelu == static_cast<int>(UnaryOp::kGelu));
static_assert(cuda_launch::unary_op::kReluGrad == static_cast<int>(UnaryOp::kReluGrad));
static_assert(cuda_launch::unary_op::kSign == static_cast<int>(UnaryOp::kSign));
static_assert(cuda_launch::binary_op::kAdd == static_cast<int>(BinaryOp::kAdd));
static_assert(cuda_launch::binary_op::kSub == static_cast<int>(BinaryOp::kSub));
static_assert(cuda_launch::binary_op::kMul == static_cast<int>(BinaryOp::kMul));
static_assert(cuda_launch::binary_op::kDiv == static_cast<int>(BinaryOp::kDiv));
static_assert(cuda_launch::binary_op::kPow == static_cast<int>(BinaryOp::kPow));
static_assert(cuda_launch::binary_op::kMaximum == static_cast<int>(BinaryOp::kMaximum));
static_assert(cuda_launch::binary_op::kMinimum == static_cast<int>(BinaryOp::kMinimum));
static_assert(cuda_launch::binary_op::kEqual == static_cast<int>(BinaryOp::kEqual));
static_assert(cuda_launch::binary_op::kNotEqual == static_cast<int>(BinaryOp::kNotEqual));
static_assert(cuda_launch::binary_op::kLess == static_cast<int>(BinaryOp::kLess));
static_assert(cuda_launch::binary_op::kLessEqual == static_cast<int>(BinaryOp::kLessEqual));
static_assert(cuda_launch::binary_op::kGreater == static_cast<int>(BinaryOp::kGreater));
static_assert(cuda_launch::binary_op::kGreaterEqual == static_cast<int>(BinaryOp::kGreaterEqual));
static_assert(cuda_launch::binary_op::kLogicalAnd == static_cast<int>(BinaryOp::kLogicalAnd));
static_assert(cuda_launch::binary_op::kLogicalOr == static_cast<int>(BinaryOp::kLogicalOr));
static_assert(cuda_launch::reduce_op::kSumOp == static_cast<int>(ReduceOp::kSum));
static_assert(cuda_launch::reduce_op::kMaxOp == static_cast<int>(ReduceOp::kMax));
static_assert(cuda_launch::reduce_op::kMinOp == static_cast<int>(ReduceOp::kMin));

namespace {

bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual; }
bool is_logical(BinaryOp op) { return op == BinaryOp::kLogicalAnd || op == BinaryOp::kLogicalOr; }

}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  const std::string name(unary_op_name(op));
  const DType dt = x.dtype();
  if (!unary_supports(op, dt)) throw_unsupported(name.c_str(), x);
  Tensor y = Tensor::empty(x.shape(), dt, x.device());
  cuda_launch::unary(static_cast<int>(op), code(dt), x.raw_data(), y.raw_data(), x.num_elements(),
                     stream_of(x, name.c_str()));
  return y;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const std::string name(binary_op_name(op));
  const char* fn = name.c_str();
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(fn, "dtypes differ: {} vs {}", describe(a), describe(b));
  }
  const DType dt = a.dtype();
  const bool supported = is_logical(op)         ? dt == DType::kBool
                         : op == BinaryOp::kPow ? is_floating(dt)
                                                : (dt != DType::kBool || op == BinaryOp::kEqual ||
                                                   op == BinaryOp::kNotEqual);
  if (!supported) {
    throw_error<DTypeError>(fn, "unsupported dtype {}: {} vs {}", dtype_name(dt), describe(a),
                            describe(b));
  }
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), fn);
  const bool to_bool = is_comparison(op) || is_logical(op);
  Tensor out = Tensor::empty(shape, to_bool ? DType::kBool : dt, a.device());
  const int64_t n = out.num_elements();
  // Logical ops compare bools as bools: the launcher's comparison path covers them.
  cuda_launch::binary(static_cast<int>(op), code(dt), a.raw_data(), broadcast(a.shape(), shape, fn),
                      b.raw_data(), broadcast(b.shape(), shape, fn), out.raw_data(), n,
                      stream_of(a, fn));
  if (op == BinaryOp::kDiv && is_integer(dt)) {
    // Integer division by zero is an error (kernels.h): one bool comes back to the host, only on
    // this integer path.
    Tensor nonzero = binary(BinaryOp::kNotEqual, b, Tensor::zeros({}, dt, b.device()));
    Tensor all = registered_table.reduce(ReduceKind::kMin, nonzero, {}, false);
    bool ok = true;
    cuda::copy_to_host(&ok, all.raw_data(), 1, b.device());
    if (!ok) {
      throw_error<InvalidArgumentError>("div", "integer division by zero: {} / {}", describe(a),
                                        describe(b));
    }
  }
  return out;
}

Tensor scale(const Tensor& x, double alpha) {
  if (!is_floating(x.dtype())) throw_unsupported("scale", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const double a =
      x.dtype() == DType::kF64 ? alpha : static_cast<double>(static_cast<float>(alpha));
  cuda_launch::scale(code(x.dtype()), x.raw_data(), y.raw_data(), x.num_elements(), a,
                     stream_of(x, "scale"));
  return y;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const char* fn = "where";
  if (cond.dtype() != DType::kBool) {
    throw_error<DTypeError>(fn, "condition must be bool, got {}", describe(cond));
  }
  if (a.dtype() != b.dtype()) {
    throw_error<DTypeError>(fn, "dtypes differ: {} and {}", describe(a), describe(b));
  }
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), fn), fn);
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  cuda_launch::where(cond.raw_data(), broadcast(cond.shape(), shape, fn), code(a.dtype()),
                     a.raw_data(), broadcast(a.shape(), shape, fn), b.raw_data(),
                     broadcast(b.shape(), shape, fn), out.raw_data(), out.num_elements(),
                     stream_of(a, fn));
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  cuda_launch::cast(code(x.dtype()), code(dtype), x.raw_data(), y.raw_data(), x.num_elements(),
                    stream_of(x, "cast"));
  return y;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  const char* fn = "broadcast_to";
  if (broadcast_shapes(x.shape(), shape, fn) != shape) {
    throw_error<ShapeError>(fn, "cannot broadcast {} to {}", describe(x), shape_to_string(shape));
  }
  Tensor y = Tensor::empty(shape, x.dtype(), x.device());
  cuda_launch::strided_copy(static_cast<int>(dtype_size(x.dtype())), x.raw_data(),
                            broadcast(x.shape(), shape, fn), y.raw_data(), contiguous(shape, fn),
                            y.num_elements(), stream_of(x, fn));
  return y;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  const char* fn = "sum_to";
  if (broadcast_shapes(shape, x.shape(), fn) != x.shape()) {
    throw_error<ShapeError>(fn, "cannot sum {} to {}", describe(x), shape_to_string(shape));
  }
  // The summed axes: the leading ones x has beyond `shape`, and those where `shape` has 1.
  std::vector<int64_t> axes;
  const size_t lead = x.shape().size() - shape.size();
  for (size_t d = 0; d < x.shape().size(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) {
      axes.push_back(static_cast<int64_t>(d));
    }
  }
  if (axes.empty()) return x.reshaped(shape).clone();
  return registered_table.reduce(ReduceKind::kSum, x, axes, false).reshaped(shape);
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_elementwise_kernels(Table& table) {
  table.unary = unary;
  table.binary = binary;
  table.scale = scale;
  table.where = where;
  table.cast = cast;
  table.broadcast_to = broadcast_to;
  table.sum_to = sum_to;
}

}  // namespace dtensor::kernels::gpu
