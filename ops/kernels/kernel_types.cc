#include "ops/kernels/kernel_types.h"

namespace dtensor::kernels {

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
