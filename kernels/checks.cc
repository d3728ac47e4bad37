#include "kernels/checks.h"

#include <algorithm>

#include "runtime/error.h"

namespace dtensor::kernels::checks {

void throw_unsupported(const char* op, const Tensor& t) {
  throw_error<DTypeError>(op, "unsupported dtype {}: {}", dtype_name(t.dtype()), describe(t));
}

void check_index_dtype(const char* op, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kI32 && t.dtype() != DType::kI64) {
    throw_error<DTypeError>(op, "{} must be i32 or i64, got {}", what, describe(t));
  }
}

int64_t normalize_axis(const char* op, int64_t axis, const Tensor& x) {
  const int64_t rank = x.rank();
  if (axis < -rank || axis >= rank) {
    throw_error<InvalidArgumentError>(op, "axis {} is out of range for {}", axis, describe(x));
  }
  return axis < 0 ? axis + rank : axis;
}

bool try_broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  const size_t rank = std::max(a.size(), b.size());
  out->assign(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t da = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const int64_t db = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    if (da != db && da != 1 && db != 1) return false;
    (*out)[d] = da == 1 ? db : da;
  }
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  Shape out;
  if (!try_broadcast_shapes(a, b, &out)) {
    throw_error<ShapeError>(op, "incompatible shapes for broadcasting: {} vs {}",
                            shape_to_string(a), shape_to_string(b));
  }
  return out;
}

bool unary_supports(UnaryOp op, DType dtype) {
  if (dtype == DType::kBool) return false;
  if (!is_integer(dtype)) return true;
  switch (op) {
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSquare:
    case UnaryOp::kRelu:
    case UnaryOp::kReluGrad:
    case UnaryOp::kSign:
      return true;
    default:
      return false;
  }
}

void cross_entropy(const char* op, const Tensor& logits, const Tensor& labels) {
  if (!is_floating(logits.dtype())) throw_unsupported(op, logits);
  if (logits.rank() < 1) {
    throw_error<ShapeError>(op, "logits must have rank >= 1, got {}", describe(logits));
  }
  check_index_dtype(op, labels, "labels");
  const Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  if (labels.shape() != rows) {
    throw_error<ShapeError>(op, "labels {} do not match logits {}", describe(labels),
                            describe(logits));
  }
}

void cross_entropy_grad(const char* op, const Tensor& logits, const Tensor& labels,
                        const Tensor& grad) {
  cross_entropy(op, logits, labels);
  if (grad.dtype() != logits.dtype()) {
    throw_error<DTypeError>(op, "grad {} does not match logits {}", describe(grad),
                            describe(logits));
  }
  if (grad.shape() != labels.shape()) {
    throw_error<ShapeError>(op, "grad {} does not match labels {}", describe(grad),
                            describe(labels));
  }
}

void one_hot(const Tensor& indices, int64_t depth) {
  check_index_dtype("one_hot", indices, "indices");
  if (depth < 0) {
    throw_error<InvalidArgumentError>("one_hot", "depth must be >= 0, got {}", depth);
  }
}

}  // namespace dtensor::kernels::checks
