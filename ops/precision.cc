#include "ops/precision.h"

#include "dtensor/relayout.h"
#include "dtensor/variable.h"
#include "ops/op_internal.h"
#include "runtime/error.h"

namespace dtensor {

using namespace op_internal;  // NOLINT: the shared machinery of every family file

namespace {

thread_local Policy current = Policy::float32();

}  // namespace

Policy Policy::float32() { return Policy(DType::kF32, DType::kF32); }

Policy Policy::mixed_bfloat16() { return Policy(DType::kBF16, DType::kF32); }

Policy Policy::from_name(const std::string& name) {
  if (name == "float32") return float32();
  if (name == "mixed_bfloat16") return mixed_bfloat16();
  throw_error<InvalidArgumentError>(
      "Policy::from_name", "unknown precision policy '{}' (float32 or mixed_bfloat16)", name);
}

Policy Policy::with_bf16_gradient_reduction() const { return Policy(compute_, compute_); }

std::string Policy::name() const {
  if (compute_ == DType::kF32) return "float32";
  std::string n = "mixed_bfloat16";
  if (reduction_ == DType::kBF16) n += "+bf16_gradient_reduction";
  return n;
}

const Policy& current_policy() { return current; }

PolicyScope::PolicyScope(const Policy& policy) : previous_(current) { current = policy; }

PolicyScope::~PolicyScope() { current = previous_; }

DTensor to_compute_dtype(const DTensor& x) {
  const Policy& policy = current_policy();
  const DType to = policy.compute_dtype();
  if (x.dtype() != DType::kF32 || to == DType::kF32) return x;
  const bool reduce_in_compute = policy.gradient_reduction_dtype() == to;
  return recorded(
      {&x}, [&] { return cast(x, to); },
      [&](const DTensor&) {
        return [reduce_in_compute](const DTensor& g) -> Grads {
          // A partial gradient (a replicated weight's, from batch-sharded activations) is summed
          // here in bf16 when the policy says so; otherwise the widening cast keeps it partial
          // and the f32 terms are summed where the variable's layout needs them.
          if (reduce_in_compute && g.layout().is_partial()) {
            return {cast(relayout(g, g.layout().without_partial()), DType::kF32)};
          }
          return {cast(g, DType::kF32)};
        };
      });
}

namespace precision_internal {

bool runs_mixed(const DTensor& a, const DTensor& b) {
  return current_policy().compute_dtype() != DType::kF32 && a.dtype() == DType::kF32 &&
         b.dtype() == DType::kF32;
}

DTensor bf16_operand(const DTensor& x) {
  return unrecorded([&] { return cast(x, DType::kBF16); });
}

DTensor bf16_weight(const DTensor& w) {
  std::optional<DTensor> copy = DVariable::copy_of(w, DType::kBF16);
  return copy ? *copy : bf16_operand(w);
}

bool bf16_reduction() { return current_policy().gradient_reduction_dtype() == DType::kBF16; }

Grads reduced_as_policy(Grads grads, bool bf16_reduction) {
  if (!bf16_reduction) return grads;
  for (std::optional<DTensor>& g : grads) {
    if (g && g->layout().is_partial()) {
      g = cast(relayout(cast(*g, DType::kBF16), g->layout().without_partial()), DType::kF32);
    }
  }
  return grads;
}

}  // namespace precision_internal
}  // namespace dtensor
