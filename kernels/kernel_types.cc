#include "kernels/kernel_types.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/error.h"

namespace dtensor::kernels {

std::string describe(const Tensor& t) {
  return fmt::format("{}{}", dtype_name(t.dtype()), shape_to_string(t.shape()));
}

std::string matmul_operand(const Tensor& t, bool transposed) {
  return describe(t) + (transposed ? "^T" : "");
}

namespace {
template <typename E>
struct Tag {
  using type = E;
};
}  // namespace

MatmulDims matmul_dims(const char* op, const Tensor& a, const Tensor& b,
                       const MatmulOptions& options) {
  const bool ta = options.transpose_a, tb = options.transpose_b;
  auto fail = [&](auto tag, const char* what) {
    throw_error<typename decltype(tag)::type>(op, "{}: {} x {}", what, matmul_operand(a, ta),
                                              matmul_operand(b, tb));
  };
  if (a.rank() < 2 || b.rank() < 2) fail(Tag<ShapeError>{}, "operands must have rank >= 2");
  if (a.dtype() != b.dtype()) fail(Tag<DTypeError>{}, "dtypes differ");
  if (a.dtype() == DType::kBool) fail(Tag<DTypeError>{}, "unsupported dtype bool");
  if (options.f32_output && a.dtype() != DType::kBF16) {
    fail(Tag<DTypeError>{}, "f32_output needs bf16 operands");
  }
  MatmulDims d;
  d.out_dtype = options.f32_output ? DType::kF32 : a.dtype();
  const int64_t ra = a.rank(), rb = b.rank();
  d.m = ta ? a.dim(ra - 1) : a.dim(ra - 2);
  d.k = ta ? a.dim(ra - 2) : a.dim(ra - 1);
  d.n = tb ? b.dim(rb - 2) : b.dim(rb - 1);
  if (d.k != (tb ? b.dim(rb - 1) : b.dim(rb - 2))) fail(Tag<ShapeError>{}, "inner dims differ");
  d.a_batch.assign(a.shape().begin(), a.shape().end() - 2);
  d.b_batch.assign(b.shape().begin(), b.shape().end() - 2);
  // Right-aligned broadcast: equal sizes, or 1 on either side.
  d.batch.assign(std::max(d.a_batch.size(), d.b_batch.size()), 1);
  for (size_t i = 0; i < d.batch.size(); ++i) {
    const size_t r = d.batch.size() - 1 - i;
    const int64_t x = i < d.a_batch.size() ? d.a_batch[d.a_batch.size() - 1 - i] : 1;
    const int64_t y = i < d.b_batch.size() ? d.b_batch[d.b_batch.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) fail(Tag<ShapeError>{}, "batch dims do not broadcast");
    d.batch[r] = x == 1 ? y : x;
  }
  d.out = d.batch;
  d.out.push_back(d.m);
  d.out.push_back(d.n);
  return d;
}

void check_accumulate_dtype(const Tensor& out) {
  if (out.dtype() != DType::kF32 && out.dtype() != DType::kF64) {
    throw_error<DTypeError>("matmul_accumulate", "output must be f32 or f64, got {}",
                            describe(out));
  }
}

void check_accumulate_output(const Tensor& a, const Tensor& b, const Tensor& out,
                             const MatmulOptions& options, const Shape& expected) {
  const char* op = "matmul_accumulate";
  const bool mixed = a.dtype() == DType::kBF16 && out.dtype() == DType::kF32;
  if (a.dtype() != out.dtype() && !mixed) {
    throw_error<DTypeError>(op, "operands {} x {} do not match output {}",
                            matmul_operand(a, options.transpose_a),
                            matmul_operand(b, options.transpose_b), describe(out));
  }
  if (out.shape() != expected) {
    throw_error<ShapeError>(op, "output {} does not match {} x {} (expected {})", describe(out),
                            matmul_operand(a, options.transpose_a),
                            matmul_operand(b, options.transpose_b), shape_to_string(expected));
  }
  if (out.shares_storage_with(a) || out.shares_storage_with(b)) {
    throw_error<InvalidArgumentError>(op, "output {} shares storage with an operand",
                                      describe(out));
  }
}

std::string_view binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "add";
    case BinaryOp::kSub:
      return "sub";
    case BinaryOp::kMul:
      return "mul";
    case BinaryOp::kDiv:
      return "div";
    case BinaryOp::kPow:
      return "pow";
    case BinaryOp::kMaximum:
      return "maximum";
    case BinaryOp::kMinimum:
      return "minimum";
    case BinaryOp::kEqual:
      return "equal";
    case BinaryOp::kNotEqual:
      return "not_equal";
    case BinaryOp::kLess:
      return "less";
    case BinaryOp::kLessEqual:
      return "less_equal";
    case BinaryOp::kGreater:
      return "greater";
    case BinaryOp::kGreaterEqual:
      return "greater_equal";
    case BinaryOp::kLogicalAnd:
      return "logical_and";
    case BinaryOp::kLogicalOr:
      return "logical_or";
  }
  return "binary";
}

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::kNeg:
      return "neg";
    case UnaryOp::kAbs:
      return "abs";
    case UnaryOp::kExp:
      return "exp";
    case UnaryOp::kLog:
      return "log";
    case UnaryOp::kSqrt:
      return "sqrt";
    case UnaryOp::kRsqrt:
      return "rsqrt";
    case UnaryOp::kSquare:
      return "square";
    case UnaryOp::kRelu:
      return "relu";
    case UnaryOp::kSigmoid:
      return "sigmoid";
    case UnaryOp::kTanh:
      return "tanh";
    case UnaryOp::kGelu:
      return "gelu";
    case UnaryOp::kReluGrad:
      return "relu_grad";
    case UnaryOp::kSign:
      return "sign";
  }
  return "unary";
}

std::string_view reduce_kind_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      return "reduce_sum";
    case ReduceKind::kMean:
      return "reduce_mean";
    case ReduceKind::kMax:
      return "reduce_max";
    case ReduceKind::kMin:
      return "reduce_min";
    case ReduceKind::kProd:
      return "reduce_prod";
  }
  return "reduce";
}

}  // namespace dtensor::kernels
