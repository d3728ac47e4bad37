#include "train/optim/weight_decay.h"

#include <cmath>

#include "ops/ops.h"

namespace dtensor {

DTensor l2_loss(const DTensor& x) {
  if (!is_floating(x.dtype())) {
    throw_error<DTypeError>("l2_loss", "{} is not a floating dtype: {}", dtype_name(x.dtype()),
                            x.short_string());
  }
  return scale(reduce_sum(square(x)), 0.5);
}

DTensor weight_decay_loss(const std::vector<DVariable>& vars, double wd) {
  if (vars.empty()) {
    throw_error<InvalidArgumentError>("weight_decay_loss", "no variables to decay");
  }
  if (!std::isfinite(wd) || wd < 0) {
    throw_error<InvalidArgumentError>("weight_decay_loss", "wd must be finite and >= 0, got {}",
                                      wd);
  }
  const DVariable& first = vars.front();
  for (const DVariable& v : vars) {
    if (v.layout().mesh() != first.layout().mesh() || v.dtype() != first.dtype()) {
      const auto [first_mesh, other_mesh] =
          v.layout().mesh() == first.layout().mesh()
              ? std::pair{first.layout().mesh().dims_string(), v.layout().mesh().dims_string()}
              : distinct_mesh_strings(first.layout().mesh(), v.layout().mesh());
      throw_error<InvalidArgumentError>(
          "weight_decay_loss",
          "variables '{}' {} on mesh {} and '{}' {} on mesh {} differ in mesh or dtype",
          first.name(), dtype_name(first.dtype()), first_mesh, v.name(), dtype_name(v.dtype()),
          other_mesh);
    }
  }
  // Sum the halves of the squares first, then scale once: one multiply by wd per step.
  DTensor total = l2_loss(first.value());
  for (size_t i = 1; i < vars.size(); ++i) total = add(total, l2_loss(vars[i].value()));
  return scale(total, wd);
}

}  // namespace dtensor
