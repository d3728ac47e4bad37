#include "runtime/threaded_processes_backend.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "runtime/error.h"

namespace dtensor {
namespace {

class ThreadedProcessesBackend final : public CollectiveBackend {
 public:
  explicit ThreadedProcessesBackend(double timeout_s)
      : timeout_(std::chrono::duration<double>(timeout_s)), local_(make_in_process_backend()) {}

  std::string_view name() const override { return "threaded-processes"; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    return {mine(group, inputs, "all_reduce", [&](const Group& g, const std::vector<Tensor>& all) {
      return local_->all_reduce(g, all, op);
    })};
  }
  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    return {mine(group, inputs, "all_gather", [&](const Group& g, const std::vector<Tensor>& all) {
      return local_->all_gather(g, all, axis);
    })};
  }
  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    return {
        mine(group, inputs, "reduce_scatter", [&](const Group& g, const std::vector<Tensor>& all) {
          return local_->reduce_scatter(g, all, op, axis);
        })};
  }
  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    return {mine(group, inputs, "all_to_all", [&](const Group& g, const std::vector<Tensor>& all) {
      return local_->all_to_all(g, all, split_axis, concat_axis);
    })};
  }
  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    return {mine(group, inputs, "broadcast", [&](const Group& g, const std::vector<Tensor>& all) {
      return local_->broadcast(g, all, root);
    })};
  }
  void barrier(const Group& group) override {
    require_one_member_per_process(group, 1, name(), "barrier");
    exchange(group, Tensor(), "barrier");
  }

 private:
  // One rendezvous point per set of processes: deposits in group order.
  struct Meeting {
    std::vector<Tensor> deposits;
    int64_t arrived = 0;
    int64_t left = 0;
    bool reading = false;
  };

  // This process's result of `compute` over every member's tensor, as if all were local.
  template <typename Compute>
  Tensor mine(const Group& group, const std::vector<Tensor>& inputs, const char* function,
              Compute&& compute) {
    require_one_member_per_process(group, inputs.size(), name(), function);
    std::vector<Tensor> all = exchange(group, inputs[0], function);
    Group here = group;
    here.owners.assign(group.devices.size(), group.self);
    const size_t self = static_cast<size_t>(
        std::find(group.owners.begin(), group.owners.end(), group.self) - group.owners.begin());
    return compute(here, all)[self].clone().with_device(inputs[0].device());
  }

  // Leaves this process's tensor and returns every member's, once all have arrived.
  std::vector<Tensor> exchange(const Group& group, const Tensor& tensor, const char* function) {
    const size_t k = group.owners.size();
    const size_t self = static_cast<size_t>(
        std::find(group.owners.begin(), group.owners.end(), group.self) - group.owners.begin());
    std::unique_lock<std::mutex> lock(mu_);
    Meeting& m = meetings_[group.owners];
    wait(
        lock, [&] { return !m.reading; }, group, function);
    m.deposits.resize(k);
    m.deposits[self] = tensor;
    if (++m.arrived == static_cast<int64_t>(k)) {
      m.reading = true;
      m.left = m.arrived;
      cv_.notify_all();
    } else {
      wait(
          lock, [&] { return m.reading; }, group, function);
    }
    std::vector<Tensor> all = m.deposits;
    if (--m.left == 0) {
      m.reading = false;
      m.arrived = 0;
      m.deposits.clear();
      cv_.notify_all();
    }
    return all;
  }

  template <typename Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready&& ready, const Group& group,
            const char* function) {
    if (!cv_.wait_for(lock, timeout_, ready)) {
      throw_error<CommunicationError>(
          function, "process {} waited more than {}s for the other processes of its group",
          group.self, timeout_.count());
    }
  }

  const std::chrono::duration<double> timeout_;
  const std::shared_ptr<CollectiveBackend> local_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::vector<int64_t>, Meeting> meetings_;
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_threaded_processes_backend(double timeout_s) {
  return std::make_shared<ThreadedProcessesBackend>(timeout_s);
}

}  // namespace dtensor
