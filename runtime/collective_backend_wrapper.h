// CollectiveBackendWrapper: a backend that forwards every call to another one (LevelDB's
// EnvWrapper shape). A decorator derives from it and overrides only what it changes, such as the
// MPI backend's shared-memory layer (runtime/mpi/shared_memory_backend.h), which takes the
// all-reduces of processes that share a host and leaves the rest to the network backend.
//
// Owns its target (shared, so several layers may hold one). Thread-safe as far as the target is.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/collective_backend.h"
#include "runtime/error.h"

namespace dtensor {

class CollectiveBackendWrapper : public CollectiveBackend {
 public:
  explicit CollectiveBackendWrapper(std::shared_ptr<CollectiveBackend> target)
      : target_(std::move(target)) {
    DTENSOR_CHECK(target_ != nullptr);
  }

  CollectiveBackend& target() const { return *target_; }

  std::string_view name() const override { return target_->name(); }
  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    return target_->all_reduce(group, inputs, op);
  }
  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    return target_->all_gather(group, inputs, axis);
  }
  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    return target_->reduce_scatter(group, inputs, op, axis);
  }
  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    return target_->all_to_all(group, inputs, split_axis, concat_axis);
  }
  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    return target_->broadcast(group, inputs, root);
  }
  void barrier(const Group& group) override { target_->barrier(group); }
  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    return target_->all_reduce_start(group, inputs, op);
  }

 private:
  std::shared_ptr<CollectiveBackend> target_;
};

}  // namespace dtensor
