#include "runtime/mpi/shared_memory_backend.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/collective_backend_wrapper.h"
#include "runtime/collective_bytes.h"
#include "runtime/mpi/async_buckets.h"
#include "runtime/mpi/host_reduction.h"
#include "runtime/mpi/host_topology.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/shared_reducer.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

std::atomic<int64_t> shared_reductions{0};

// How a group's all-reduces run, decided on first use.
struct GroupPlan {
  SharedWindow one_host;                 // every member on this host
  std::unique_ptr<HostReduction> hosts;  // members on several hosts
  bool on_network() const { return one_host.reducer == nullptr && hosts == nullptr; }
};

class SharedMemoryBackend final : public CollectiveBackendWrapper {
 public:
  SharedMemoryBackend(std::shared_ptr<CollectiveBackend> network,
                      std::shared_ptr<MpiSession> session)
      : CollectiveBackendWrapper(std::move(network)), session_(std::move(session)) {}
  ~SharedMemoryBackend() override { session_->comm_thread().stop(); }  // its work uses this

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    require_one_member_per_process(group, inputs.size(), name(), "all_reduce");
    std::unique_lock<std::mutex> lock = session_->exclusive();
    if (on_network(group)) {
      lock.unlock();
      return target().all_reduce(group, inputs, op);
    }
    if (agreement_enabled()) {
      session_->agree(group, describe_all_reduce(inputs[0], op), "all_reduce");
    }
    GroupPlan& plan = plan_for(ranks_of(group));
    if (plan.on_network()) {  // found on first use: the network agrees again, once
      lock.unlock();
      return target().all_reduce(group, inputs, op);
    }
    return {reduce_here(plan, group, inputs[0], op, "all_reduce")};
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    require_one_member_per_process(group, inputs.size(), name(), "reduce_scatter");
    const Tensor& in = inputs[0];
    std::unique_lock<std::mutex> lock = session_->exclusive();
    // Contiguous chunks go out as MPI_Reduce_scatter, each process receiving only its own.
    if (leading_extent(in, axis) == 1 || on_network(group)) {
      lock.unlock();
      return target().reduce_scatter(group, inputs, op, axis);
    }
    if (agreement_enabled()) {
      session_->agree(group, describe_reduce_scatter(in, op, axis), "reduce_scatter");
    }
    GroupPlan& plan = plan_for(ranks_of(group));
    if (plan.on_network()) {
      lock.unlock();
      return target().reduce_scatter(group, inputs, op, axis);
    }
    // The whole reduction, then this member's chunk.
    const Tensor reduced = reduce_here(plan, group, in, op, "reduce_scatter");
    const ShardRange own = chunk_range(in.dim(axis), group.size(), self_rank(group));
    std::vector<int64_t> begin(static_cast<size_t>(in.rank()), 0);
    begin[static_cast<size_t>(axis)] = own.offset;
    return {slice_box(reduced, begin, with_dim(in.shape(), axis, own.size))};
  }

  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    if (!session_->threaded()) return CollectiveBackend::all_reduce_start(group, inputs, op);
    return start_bucket(*session_, name(), group, inputs, op,
                        [this, ranks = ranks_of(group), op](Bucket& b) {
                          GroupPlan* plan = nullptr;
                          {
                            std::unique_lock<std::mutex> lock = session_->lock();
                            plan = &plan_for(ranks);
                          }
                          if (plan->on_network()) {
                            reduce_bucket_over_mpi(*session_, b, ranks, op);
                            return;
                          }
                          // Shared memory needs no MPI call: each process does its share when it
                          // runs, sleeps while it waits.
                          reduce_planned(*plan, b.inputs, b.outputs, op, "all_reduce_start",
                                         /*lock_for_mpi=*/true);
                        });
  }

 private:
  // Whether the group is known to stay on the network backend: one process, or processes that
  // turned out (on first use) to have neither a shared-memory window nor a host-aware plan.
  // Caller holds the lock, taken through exclusive(): every process then decides at the same
  // point of its program.
  bool on_network(const Group& group) {
    if (group.size() < 2) return true;
    auto it = plans_.find(ranks_of(group));
    return it != plans_.end() && it->second.on_network();
  }

  // The plan of `processes`, made on first use (collective over them). Caller holds the lock.
  GroupPlan& plan_for(const std::vector<int>& processes) {
    auto it = plans_.find(processes);
    if (it != plans_.end()) return it->second;
    GroupPlan& plan = plans_[processes];
    if (processes.size() < 2) return plan;
    MPI_Comm comm = session_->comm_for(processes);
    const std::vector<int> hosts = hosts_of(comm, processes);
    if (std::all_of(hosts.begin(), hosts.end(), [&](int h) { return h == hosts[0]; })) {
      make_window(comm, plan.one_host);
      if (plan.one_host.reducer != nullptr) {
        session_->route_agreement(processes, plan.one_host.reducer.get());
      }
    } else if (processes.size() > 2) {
      // Two processes on two hosts: MPI adds the same two terms, and its two-process path
      // overlaps best (runtime/mpi/async_buckets.h).
      plan.hosts = HostReduction::make(*session_, processes, hosts);
    }
    return plan;
  }

  // A planned (not network) reduction of `inputs` into `outputs`.
  void reduce_planned(GroupPlan& plan, const std::vector<Tensor>& inputs,
                      std::vector<Tensor>& outputs, ReduceOp op, const char* function,
                      bool lock_for_mpi) {
    if (plan.one_host.reducer != nullptr) {
      plan.one_host.reducer->all_reduce(inputs, outputs, op, function);
    } else {
      plan.hosts->all_reduce(inputs, outputs, op, function, lock_for_mpi);
      if (!plan.hosts->shares_memory()) return;
    }
    shared_reductions.fetch_add(1, std::memory_order_relaxed);
  }

  // Caller holds the lock.
  Tensor reduce_here(GroupPlan& plan, const Group& group, const Tensor& in, ReduceOp op,
                     const char* function) {
    const double began = overlap_trace_on() ? trace_clock_ms() : 0;
    std::vector<Tensor> outputs = {Tensor::empty(in.shape(), in.dtype(), in.device())};
    reduce_planned(plan, {in}, outputs, op, function, /*lock_for_mpi=*/false);
    if (overlap_trace_on()) trace_blocking(group.self, in.nbytes(), began);
    return outputs[0];
  }

  std::shared_ptr<MpiSession> session_;
  std::map<std::vector<int>, GroupPlan> plans_;  // by process list; guarded by the lock
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_shared_memory_backend(
    std::shared_ptr<CollectiveBackend> network, std::shared_ptr<MpiSession> session) {
  return std::make_shared<SharedMemoryBackend>(std::move(network), std::move(session));
}

int64_t shared_memory_reduction_count() {
  return shared_reductions.load(std::memory_order_relaxed);
}

}  // namespace dtensor
