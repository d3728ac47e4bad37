// The vocabulary of the kernel front (kernels/kernels.h) shared by every backend: op
// enums with their names, option and result structs, and the argument checks every backend makes
// the same way (so their errors match word for word). Plain values, no state.
#pragma once

#include <string>
#include <string_view>

#include "runtime/tensor.h"

namespace dtensor::kernels {

enum class UnaryOp {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kSquare,
  kRelu,
  kSigmoid,
  kTanh,
  kGelu,      // tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kReluGrad,  // 1 if x > 0 else 0, in x's dtype
  kSign,      // -1, 0 or 1 (NaN stays NaN)
};
// "neg", "abs", ..., "relu_grad", "sign": the name used in error messages.
std::string_view unary_op_name(UnaryOp op);

enum class BinaryOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
  kLogicalAnd,
  kLogicalOr,
};
// "add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal", "not_equal", "less",
// "less_equal", "greater", "greater_equal", "logical_and", "logical_or".
std::string_view binary_op_name(BinaryOp op);

struct MatmulOptions {
  bool transpose_a = false;  // a holds [..., k, m]
  bool transpose_b = false;  // b holds [..., n, k]
  int blas_threads = 0;      // > 0: set_blas_threads(blas_threads) first; 0: leave the setting
  // bf16 operands only: return the f32 accumulator as it is instead of rounding it to bf16
  // (mixed precision: no bf16 round trip and no separate cast; dense's bias is then f32).
  bool f32_output = false;
};

// "f32[2,3]": a tensor as kernel errors name it; matmul_operand adds "^T" for a transposed operand.
std::string describe(const Tensor& t);
std::string matmul_operand(const Tensor& t, bool transposed);

// The dims of a (possibly batched, broadcast) matmul a x b under `options`' transposes, validated
// the same way by every backend: ranks >= 2, equal non-bool dtypes, equal inner dims, batch dims
// that broadcast, f32_output only with bf16 operands (errors name `op` and both operands).
// out = batch + [m, n], of dtype out_dtype.
struct MatmulDims {
  int64_t m = 0, n = 0, k = 0;
  Shape a_batch, b_batch, batch, out;
  DType out_dtype = DType::kF32;
};
MatmulDims matmul_dims(const char* op, const Tensor& a, const Tensor& b,
                       const MatmulOptions& options);

// matmul_accumulate's contract, checked by every backend: `out` is f32 or f64 (DTypeError), then
// (once the backend has computed the product's shape `expected`) the operands' dtype matches out's
// or is bf16 into f32 (DTypeError), out has shape `expected` (ShapeError), and out shares no
// storage with an operand (InvalidArgumentError).
void check_accumulate_dtype(const Tensor& out);
void check_accumulate_output(const Tensor& a, const Tensor& b, const Tensor& out,
                             const MatmulOptions& options, const Shape& expected);

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd };
// "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod".
std::string_view reduce_kind_name(ReduceKind kind);

struct LayerNormResult {
  Tensor y, mean, rstd;
};

struct LayerNormGrad {
  Tensor dx, dgamma, dbeta;
};

}  // namespace dtensor::kernels
