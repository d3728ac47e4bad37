#include "runtime/mpi/host_staged_backend.h"

#include <string>
#include <utility>

#include "runtime/element_loops.h"
#include "runtime/error.h"

namespace dtensor {
namespace {

std::vector<Tensor> to_host(const std::vector<Tensor>& members) {
  std::vector<Tensor> out;
  out.reserve(members.size());
  for (const Tensor& t : members) out.push_back(kernels::host_readable(t));
  return out;
}

// Result i onto the device of member i.
std::vector<Tensor> onto_devices(const std::vector<Tensor>& results,
                                 const std::vector<Tensor>& members) {
  DTENSOR_CHECK(results.size() == members.size());
  std::vector<Tensor> out;
  out.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    out.push_back(kernels::on_device(kernels::host_readable(results[i]), members[i].device()));
  }
  return out;
}

class StagedPending final : public PendingCollective {
 public:
  StagedPending(std::unique_ptr<PendingCollective> host, std::vector<std::vector<Tensor>> inputs)
      : host_(std::move(host)), inputs_(std::move(inputs)) {}
  bool test() override { return host_->test(); }
  std::vector<std::vector<Tensor>> wait() override {
    std::vector<std::vector<Tensor>> results = host_->wait();
    DTENSOR_CHECK(results.size() == inputs_.size());
    for (size_t t = 0; t < results.size(); ++t) results[t] = onto_devices(results[t], inputs_[t]);
    return results;
  }

 private:
  std::unique_ptr<PendingCollective> host_;
  std::vector<std::vector<Tensor>> inputs_;  // for the members' devices
};

class HostStagedBackend final : public CollectiveBackend {
 public:
  explicit HostStagedBackend(std::shared_ptr<CollectiveBackend> host)
      : host_(std::move(host)), name_("host-staged(" + std::string(host_->name()) + ")") {}

  std::string_view name() const override { return name_; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    return onto_devices(host_->all_reduce(group, to_host(inputs), op), inputs);
  }
  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    return onto_devices(host_->all_gather(group, to_host(inputs), axis), inputs);
  }
  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    return onto_devices(host_->reduce_scatter(group, to_host(inputs), op, axis), inputs);
  }
  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    return onto_devices(host_->all_to_all(group, to_host(inputs), split_axis, concat_axis), inputs);
  }
  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    return onto_devices(host_->broadcast(group, to_host(inputs), root), inputs);
  }
  void barrier(const Group& group) override { host_->barrier(group); }

  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    std::vector<std::vector<Tensor>> staged;
    staged.reserve(inputs.size());
    for (const std::vector<Tensor>& members : inputs) staged.push_back(to_host(members));
    return std::make_unique<StagedPending>(host_->all_reduce_start(group, staged, op), inputs);
  }

 private:
  std::shared_ptr<CollectiveBackend> host_;
  std::string name_;
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_host_staged_backend(
    std::shared_ptr<CollectiveBackend> host) {
  if (host == nullptr) {
    throw_error<InvalidArgumentError>("make_host_staged_backend", "the host backend is null");
  }
  return std::make_shared<HostStagedBackend>(std::move(host));
}

}  // namespace dtensor
