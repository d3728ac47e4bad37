#include "runtime/gpu_in_process_backend.h"

#include "runtime/block.h"

namespace dtensor {
namespace {

class GpuInProcessBackend final : public CollectiveBackend {
 public:
  GpuInProcessBackend(GpuPlacement placement, std::string_view name)
      : placement_(placement), name_(name) {}

  std::string_view name() const override { return name_; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    require_local(group, "all_reduce");
    return hand_out(reduce_tensors(on_first_gpu(inputs), op), inputs);
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    require_local(group, "all_gather");
    const std::vector<Tensor> staged = on_first_gpu(inputs);
    Shape shape = staged[0].shape();
    int64_t total = 0;
    for (const Tensor& in : staged) total += in.dim(axis);
    shape[static_cast<size_t>(axis)] = total;
    Tensor out = Tensor::empty(shape, staged[0].dtype(), staged[0].device());
    std::vector<int64_t> at(shape.size(), 0);
    for (const Tensor& in : staged) {
      copy_box(in, std::vector<int64_t>(shape.size(), 0), out, at, in.shape());
      at[static_cast<size_t>(axis)] += in.dim(axis);
    }
    return hand_out(out, inputs);
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    require_local(group, "reduce_scatter");
    return relocate(inner_->reduce_scatter(group, on_first_gpu(inputs), op, axis), inputs);
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    require_local(group, "all_to_all");
    return relocate(inner_->all_to_all(group, on_first_gpu(inputs), split_axis, concat_axis),
                    inputs);
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    require_local(group, "broadcast");
    return hand_out(inputs[static_cast<size_t>(root)], inputs);
  }

  void barrier(const Group& group) override { require_local(group, "barrier"); }

 private:
  bool same_gpu(const Device& a, const Device& b) const {
    return placement_.physical_gpu_of(a) == placement_.physical_gpu_of(b);
  }

  // `t` as a tensor of `device`: the same buffer when both are logical devices of one GPU.
  Tensor place(const Tensor& t, const Device& device) const {
    return same_gpu(t.device(), device) ? t.with_device(device) : placement_.to_device(t, device);
  }

  // The inputs, each on the first input's physical GPU (tagged with their own devices when they
  // already are, else with the first's), so that one GPU's kernels can read them all.
  std::vector<Tensor> on_first_gpu(const std::vector<Tensor>& inputs) const {
    std::vector<Tensor> staged;
    staged.reserve(inputs.size());
    for (const Tensor& in : inputs) {
      staged.push_back(same_gpu(in.device(), inputs[0].device())
                           ? in
                           : placement_.to_device(in, inputs[0].device()));
    }
    return staged;
  }

  // Each member's own copy of `result` (the first member keeps `result`).
  std::vector<Tensor> hand_out(const Tensor& result, const std::vector<Tensor>& inputs) const {
    std::vector<Tensor> out;
    out.reserve(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Device& device = inputs[i].device();
      if (i == 0) {
        out.push_back(place(result, device));
      } else if (same_gpu(result.device(), device)) {
        out.push_back(result.with_device(device).clone());
      } else {
        out.push_back(placement_.to_device(result, device));
      }
    }
    return out;
  }

  void require_local(const Group& group, const char* function) const {
    for (size_t i = 0; i < group.devices.size(); ++i) {
      if (group.owners[i] != group.self) {
        throw_error<CommunicationError>(
            function,
            "device {} belongs to process {}; the {} backend needs every member of a group in "
            "this process (register an inter-process GPU backend for meshes across processes)",
            group.devices[i], group.owners[i], name_);
      }
    }
  }

  // The in-process backend's reduce-scatter and all-to-all only copy boxes and reduce on the
  // devices of their inputs; their outputs then move to each member's own GPU.
  std::vector<Tensor> relocate(std::vector<Tensor> outputs,
                               const std::vector<Tensor>& inputs) const {
    for (size_t j = 0; j < outputs.size(); ++j) outputs[j] = place(outputs[j], inputs[j].device());
    return outputs;
  }

  GpuPlacement placement_;
  std::string_view name_;
  std::shared_ptr<CollectiveBackend> inner_ = make_in_process_backend();
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_gpu_in_process_backend(GpuPlacement placement,
                                                               std::string_view name) {
  if (placement.physical_gpu_of == nullptr || placement.to_device == nullptr) {
    throw_error<InvalidArgumentError>("make_gpu_in_process_backend",
                                      "backend {} needs physical_gpu_of and to_device", name);
  }
  return std::make_shared<GpuInProcessBackend>(placement, name);
}

}  // namespace dtensor
