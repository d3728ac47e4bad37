// Precision policies: which dtype the heavy ops compute in, while the variables and the
// optimizer state keep theirs (Keras `mixed_bfloat16`, PyTorch autocast, FSDP2's
// MixedPrecisionPolicy).
//
//   PolicyScope mixed(Policy::mixed_bfloat16());   // this thread, until the scope ends
//   DTensor y = dense(x, w.value(), b.value(), DenseActivation::kRelu);
//
// Under a policy with a bf16 compute dtype, matmul, dense and conv2d called with f32 operands
// run on bf16 copies of them (oneDNN: bf16 products, f32 accumulation) and return the f32
// accumulator as it is (no bf16 rounding of the result).
// Everything around them (softmax, cross-entropy, layer norm, reductions, the loss, the
// optimizer) stays f32. Gradients flow back as f32: each f32 input gets an f32 gradient, the
// incoming gradient cast to bf16 once for the two products that use it. The partial gradient of
// a replicated weight is reduced in f32 (the default), or, with `with_bf16_gradient_reduction()`,
// in bf16 (each term rounded to bf16, summed, widened): half the bytes on the wire, at the cost
// of bf16 roundings of the sum (docs/mixed_precision.md states the bound for each collective
// backend).
// Operands already in bf16 (or f64, or integers) are left alone: the policy only changes f32.
//
// The current policy is per thread (float32 unless a PolicyScope says otherwise); a captured
// step records the ops the policy chose while it was traced. Policy is a value type; every
// function here is thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "ops/ops.h"

namespace dtensor {

class Policy {
 public:
  // Everything in f32 (the default).
  static Policy float32();
  // matmul, dense and conv2d in bf16 with f32 accumulation; variables, gradients and the
  // reduction of gradients in f32.
  static Policy mixed_bfloat16();
  // "float32" or "mixed_bfloat16"; InvalidArgumentError naming the accepted names otherwise.
  static Policy from_name(const std::string& name);

  // The same policy, reducing partial gradients in the compute dtype (bf16) instead of f32.
  Policy with_bf16_gradient_reduction() const;

  // "float32", "mixed_bfloat16", "mixed_bfloat16+bf16_gradient_reduction".
  std::string name() const;
  DType compute_dtype() const { return compute_; }
  DType variable_dtype() const { return DType::kF32; }
  // The dtype the partial gradients of replicated weights are summed in.
  DType gradient_reduction_dtype() const { return reduction_; }

  bool operator==(const Policy& o) const {
    return compute_ == o.compute_ && reduction_ == o.reduction_;
  }
  bool operator!=(const Policy& o) const { return !(*this == o); }

 private:
  Policy(DType compute, DType reduction) : compute_(compute), reduction_(reduction) {}
  DType compute_;
  DType reduction_;
};

// The calling thread's policy.
const Policy& current_policy();

// Sets the calling thread's policy until destroyed, then restores the previous one. Scopes
// nest; destroy them in reverse order of creation, on the thread that created them.
class PolicyScope {
 public:
  explicit PolicyScope(const Policy& policy);
  ~PolicyScope();
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;

 private:
  Policy previous_;
};

// x cast to the current policy's compute dtype when the policy changes x's dtype (f32 -> bf16),
// recorded so that the gradient comes back in x's dtype, the partial sums reduced as the policy
// says; x itself otherwise.
DTensor to_compute_dtype(const DTensor& x);

namespace precision_internal {

// True when the current policy runs an op with these f32 operands in another dtype; the op then
// calls its mixed version below (the hooks in ops/matmul.cc and ops/conv.cc).
bool runs_mixed(const DTensor& a, const DTensor& b);

// matmul and dense with f32 operands as ops of their own (ops/matmul.cc): bf16 copies of the
// operands, products whose f32 result comes straight from the accumulator (the bias and ReLU
// fused in), f32 gradients for the f32 inputs, partial ones reduced as the policy says.
DTensor mixed_matmul(const DTensor& a, const DTensor& b, bool transpose_a, bool transpose_b);
DTensor mixed_dense(const DTensor& x, const DTensor& w, const DTensor& b,
                    DenseActivation activation);
// conv2d with f32 operands as an op of its own (ops/conv.cc), as mixed_dense: bf16 copies of the
// operands (the filter from its variable's copy), the f32 result straight from oneDNN's
// accumulator, and f32 gradients from bf16 convolutions of the gradient cast to bf16 once.
DTensor mixed_conv2d(const DTensor& x, const DTensor& w, const Conv2dOptions& options);
// The same with the f32 bias (and ReLU) fused: added to the f32 accumulator.
DTensor mixed_conv2d(const DTensor& x, const DTensor& w, const DTensor& b,
                     DenseActivation activation, const Conv2dOptions& options);

// Whether the current policy sums partial gradients in bf16 (read when a mixed op records itself).
bool bf16_reduction();
// A mixed op's gradients, each partial one reduced as `bf16_reduction` says: in bf16 (each f32
// term rounded to bf16 once, summed in bf16, widened), or left partial for the f32 sum where
// the variable's layout needs it.
std::vector<std::optional<DTensor>> reduced_as_policy(std::vector<std::optional<DTensor>> grads,
                                                      bool bf16_reduction);

// x cast to bf16 without a tape entry (the mixed ops record themselves).
DTensor bf16_operand(const DTensor& x);
// The bf16 copy of a weight for the mixed products: the copy its variable keeps when w is a
// variable's current value (cast once, then refreshed by the optimizer's in-place update), else
// bf16_operand(w).
DTensor bf16_weight(const DTensor& w);

}  // namespace precision_internal
}  // namespace dtensor
