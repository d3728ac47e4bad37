#include "ops/halo_expand.h"

#include "dtensor/relayout.h"

namespace dtensor {

WindowInputs decide_window_inputs(const OpSignature& sig,
                                  const std::vector<const DTensor*>& inputs) {
  check_same_mesh(sig.op, inputs);
  WindowInputs out{decide_sharding(sig, inputs), {}};
  out.inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Layout& target = out.decision->inputs[i];
    out.inputs.push_back(inputs[i]->layout() == target ? *inputs[i] : relayout(*inputs[i], target));
  }
  return out;
}

std::vector<Tensor> run_per_device(const Mesh& mesh, DType dtype,
                                   const std::function<Shape(size_t)>& result_shape,
                                   const std::function<bool(size_t)>& has_work,
                                   const std::function<Tensor(size_t)>& kernel) {
  const auto& ids = mesh.local_device_ids();
  std::vector<Tensor> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Device device{mesh.device_type(), ids[i]};
    const Shape shape = result_shape(i);
    if (num_elements(shape) == 0 || !has_work(i)) {
      out.push_back(Tensor::zeros(shape, dtype, device));
      continue;
    }
    Tensor r = kernel(i);
    DTENSOR_CHECK(r.shape() == shape);
    out.push_back(r.device() == device ? r : r.with_device(device));
  }
  return out;
}

}  // namespace dtensor
