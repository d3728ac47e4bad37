#include "runtime/mpi/shared_memory_backend.h"

#include <mpi.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/collective_backend_wrapper.h"
#include "runtime/collective_bytes.h"
#include "runtime/mpi/async_buckets.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/shared_reducer.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

std::atomic<int64_t> shared_reductions{0};

// A SharedReducer over an MPI shared-memory window.
struct SharedWindow {
  MPI_Win window = MPI_WIN_NULL;
  std::unique_ptr<SharedReducer> reducer;
};

// Makes `made` over the processes of `comm` when all of them share one node and the window can
// be had (collective over `comm`; every member sees the same outcome).
void make_window(MPI_Comm comm, SharedWindow& made) {
  int members = 0;
  MPI_Comm_size(comm, &members);
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "all_reduce",
            "MPI_Comm_split_type");
  int size = 0, self = 0;
  MPI_Comm_size(node, &size);
  MPI_Comm_rank(node, &self);
  // Every member sees the same answer: either all share one node or every node has fewer.
  if (size == members) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* mine = nullptr;
    const int rc =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(SharedReducer::segment_bytes(size)), 1, info,
                                node, &mine, &made.window);
    MPI_Info_free(&info);
    // Without shared memory (no such MPI component, no room for it) all stay on MPI.
    int ok = rc == MPI_SUCCESS ? 1 : 0;
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node), "all_reduce",
              "MPI_Allreduce");
    if (ok == 1) {
      std::vector<void*> segments(static_cast<size_t>(size));
      for (int p = 0; p < size; ++p) {
        MPI_Aint bytes = 0;
        int unit = 0;
        check_mpi(MPI_Win_shared_query(made.window, p, &bytes, &unit, &segments[p]), "all_reduce",
                  "MPI_Win_shared_query");
      }
      std::memset(mine, 0, SharedReducer::kHeaderBytes);
      check_mpi(MPI_Barrier(node), "all_reduce", "MPI_Barrier");  // every header zeroed
      made.reducer = std::make_unique<SharedReducer>(segments, self);
    } else if (rc == MPI_SUCCESS) {
      MPI_Win_free(&made.window);
    }
  }
  MPI_Comm_free(&node);
}

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
    SharedReducer* reducer = reducer_for(ranks_of(group));
    if (reducer == nullptr) {  // found on first use: the network agrees again, once
      lock.unlock();
      return target().all_reduce(group, inputs, op);
    }
    return {reduce_here(*reducer, group, inputs[0], op, "all_reduce")};
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
    SharedReducer* reducer = reducer_for(ranks_of(group));
    if (reducer == nullptr) {
      lock.unlock();
      return target().reduce_scatter(group, inputs, op, axis);
    }
    // The whole reduction, then this member's chunk.
    const Tensor reduced = reduce_here(*reducer, group, in, op, "reduce_scatter");
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
                          SharedReducer* reducer = nullptr;
                          {
                            std::unique_lock<std::mutex> lock = session_->lock();
                            reducer = reducer_for(ranks);
                          }
                          if (reducer == nullptr) {
                            reduce_bucket_over_mpi(*session_, b, ranks, op);
                            return;
                          }
                          // No MPI call: each process does its share when it runs, sleeps
                          // while it waits.
                          reducer->all_reduce(b.inputs, b.outputs, op, "all_reduce_start");
                          shared_reductions.fetch_add(1, std::memory_order_relaxed);
                        });
  }

 private:
  // Whether the group is known to stay on the network backend: one process, or processes that
  // turned out (on first use) not to share a host. Caller holds the lock, taken through
  // exclusive(): every process then decides at the same point of its program.
  bool on_network(const Group& group) {
    if (group.size() < 2) return true;
    auto it = windows_.find(ranks_of(group));
    return it != windows_.end() && it->second.reducer == nullptr;
  }

  // The reducer of `processes` when they share a host, made on first use (a collective call over
  // them); null otherwise. Caller holds the lock.
  SharedReducer* reducer_for(const std::vector<int>& processes) {
    if (processes.size() < 2) return nullptr;
    auto it = windows_.find(processes);
    if (it != windows_.end()) return it->second.reducer.get();
    SharedWindow& made = windows_[processes];
    make_window(session_->comm_for(processes), made);
    if (made.reducer != nullptr) session_->route_agreement(processes, made.reducer.get());
    return made.reducer.get();
  }

  // Caller holds the lock.
  Tensor reduce_here(SharedReducer& reducer, const Group& group, const Tensor& in, ReduceOp op,
                     const char* function) {
    const double began = overlap_trace_on() ? trace_clock_ms() : 0;
    std::vector<Tensor> outputs = {Tensor::empty(in.shape(), in.dtype(), in.device())};
    reducer.all_reduce({in}, outputs, op, function);
    shared_reductions.fetch_add(1, std::memory_order_relaxed);
    if (overlap_trace_on()) trace_blocking(group.self, in.nbytes(), began);
    return outputs[0];
  }

  std::shared_ptr<MpiSession> session_;
  std::map<std::vector<int>, SharedWindow> windows_;  // by process list; guarded by the lock
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
