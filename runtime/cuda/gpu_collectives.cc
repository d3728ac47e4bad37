#include "runtime/cuda/gpu_collectives.h"

#include "runtime/backend_registry.h"
#include "runtime/block.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

namespace dtensor::cuda {
namespace {

bool same_gpu(const Device& a, const Device& b) { return physical_gpu_of(a) == physical_gpu_of(b); }

// `t` as a tensor of `device`: the same buffer when both are logical devices of one GPU.
Tensor place(const Tensor& t, const Device& device) {
  return same_gpu(t.device(), device) ? t.with_device(device) : to_device(t, device);
}

// The inputs, each on the first input's physical GPU (tagged with their own devices when they
// already are, else with the first's), so that one GPU's kernels can read them all.
std::vector<Tensor> on_first_gpu(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> staged;
  staged.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    staged.push_back(same_gpu(in.device(), inputs[0].device()) ? in
                                                               : to_device(in, inputs[0].device()));
  }
  return staged;
}

// Each member's own copy of `result` (the first member keeps `result`). Not one shared buffer:
// the op layer treats shards that share storage as host memory it may stack rows of
// (ops/expand.cc), which GPU memory is not.
std::vector<Tensor> hand_out(const Tensor& result, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Device& device = inputs[i].device();
    if (i == 0) {
      out.push_back(place(result, device));
    } else if (same_gpu(result.device(), device)) {
      out.push_back(result.with_device(device).clone());
    } else {
      out.push_back(to_device(result, device));
    }
  }
  return out;
}

void require_local(const Group& group, const char* function) {
  for (size_t i = 0; i < group.devices.size(); ++i) {
    if (group.owners[i] != group.self) {
      throw_error<CommunicationError>(
          function,
          "device {} belongs to process {}; the in-process GPU backend needs every member of a "
          "group in this process (register the NCCL backend for meshes across processes)",
          group.devices[i], group.owners[i]);
    }
  }
}

class GpuInProcessBackend final : public CollectiveBackend {
 public:
  std::string_view name() const override { return "in-process GPU"; }

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
  // The in-process backend's reduce-scatter and all-to-all only copy boxes and reduce on the
  // devices of their inputs; their outputs then move to each member's own GPU.
  static std::vector<Tensor> relocate(std::vector<Tensor> outputs,
                                      const std::vector<Tensor>& inputs) {
    for (size_t j = 0; j < outputs.size(); ++j) outputs[j] = place(outputs[j], inputs[j].device());
    return outputs;
  }

  std::shared_ptr<CollectiveBackend> inner_ = make_in_process_backend();
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_gpu_in_process_backend() {
  return std::make_shared<GpuInProcessBackend>();
}

void register_gpu_collectives() {
  register_collective_backends(DeviceType::kGPU, make_gpu_in_process_backend(), nullptr);
}

}  // namespace dtensor::cuda
