// CollectiveBackend: the seam between the runtime and a transport (in-process, MPI, NCCL).
//
// A backend runs one collective over one *group* of devices. The caller passes the tensors of the
// group members that this process owns, in group order, and gets one result per such member.
// Members owned by other processes take part through their own processes' calls. Results may
// share storage with each other or with the inputs (a replicated result is stored once), so a
// caller must not write a result in place unless Tensor::is_unique() says it may.
//
// Split and concatenation along an axis follow chunk semantics (runtime/shape.h chunk_range):
// member j of a group of k receives chunk j of size ceil(n/k), the last chunks shorter or empty.
//
// Two kinds of backends exist (see runtime/backend_registry.h for how a mesh picks one):
//   - intra-process: every member of a group lives in this process (in-process: threads and
//     shared memory);
//   - flat inter-process: every process of a group owns exactly one member, so each call carries
//     one tensor (MPI, a future NCCL with one rank per GPU). make_hierarchical_backend
//     (runtime/hierarchical_backend.h) composes one of each for groups of any shape.
//
// Implementations are thread-safe for calls on disjoint groups.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

struct Group {
  std::vector<int64_t> devices;  // global device ids, in group order
  std::vector<int64_t> owners;   // owning process of each device
  int64_t self = 0;              // this process

  int64_t size() const { return static_cast<int64_t>(devices.size()); }
  // Positions in `devices` of the members this process owns, ascending.
  std::vector<int64_t> local_positions() const;
};

// A collective started by CollectiveBackend::all_reduce_start and not finished yet. Every process
// of the group finishes its starts in the order it made them. Owned by one thread at a time.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Lets the transport move data (MPI progresses a nonblocking collective only inside MPI calls)
  // and says whether the results are ready. Never blocks.
  virtual bool test() = 0;
  // Blocks until done; then results[t] holds tensor t's results, as all_reduce returns them.
  // Called once.
  virtual std::vector<std::vector<Tensor>> wait() = 0;
};

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual std::string_view name() const = 0;

  // Every member gets the elementwise reduction of all members' tensors (equal shapes).
  virtual std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                         ReduceOp op) = 0;
  // Every member gets the members' tensors concatenated along `axis` in group order; sizes along
  // `axis` may differ (all-gather-v).
  virtual std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                         int64_t axis) = 0;
  // Member j gets chunk j along `axis` of the elementwise reduction (reduce-scatter-v).
  virtual std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                             ReduceOp op, int64_t axis) = 0;
  // Member j gets chunk j along `split_axis` of every member's tensor, concatenated along
  // `concat_axis` in group order (all-to-all-v).
  virtual std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                         int64_t split_axis, int64_t concat_axis) = 0;
  // Every member gets the tensor of the member at position `root`.
  virtual std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                        int64_t root) = 0;
  virtual void barrier(const Group& group) = 0;

  // Starts a bucket of all-reduces over one group, to be finished by wait() while the caller
  // computes: inputs[t] holds tensor t of each local member, as all_reduce takes them (shapes may
  // differ between tensors; one dtype per tensor). The default runs the blocking all_reduce of
  // each tensor now and returns them done: backends that cannot overlap need nothing more. MPI
  // hands the bucket to its communication thread (runtime/mpi/mpi_backend.h).
  virtual std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op);
};

// A collective whose results are there already (the blocking fallback of all_reduce_start).
class CompletedCollective final : public PendingCollective {
 public:
  explicit CompletedCollective(std::vector<std::vector<Tensor>> results)
      : results_(std::move(results)) {}
  bool test() override { return true; }
  std::vector<std::vector<Tensor>> wait() override { return std::move(results_); }

 private:
  std::vector<std::vector<Tensor>> results_;
};

inline std::unique_ptr<PendingCollective> CollectiveBackend::all_reduce_start(
    const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) {
  std::vector<std::vector<Tensor>> results;
  results.reserve(inputs.size());
  for (const std::vector<Tensor>& members : inputs)
    results.push_back(all_reduce(group, members, op));
  return std::make_unique<CompletedCollective>(std::move(results));
}

// One result shared by every member in `inputs` (re-tagged with each member's device): how a
// backend returns a replicated result stored once. Only members in the result's memory space can
// share it (runtime/device.h same_memory_space: the CPU devices of a process); for any other
// member it throws InternalError, since a backend for such devices (a GPU each) must return one
// result per member.
std::vector<Tensor> share_result(const Tensor& result, const std::vector<Tensor>& inputs);

// Throws CommunicationError "[function] the <backend> backend takes one member per process ..."
// unless every process of `group` owns exactly one member and `inputs` holds this process's one
// tensor: the precondition of a flat inter-process backend.
void require_one_member_per_process(const Group& group, size_t num_inputs, std::string_view backend,
                                    const char* function);

// The backend for devices that live in this process: threads and shared memory. It requires
// every member of a group to be local.
std::shared_ptr<CollectiveBackend> make_in_process_backend();

}  // namespace dtensor
