// Collectives over mesh groups: the calls relayout and op expansions make.
//
// Each function takes the local shards of one mesh-wide value (one tensor per local device of
// `mesh`, in local order) and runs the collective over every group of devices that differ only
// along the mesh dims in `dims`, returning the new local shards in the same order. Groups of one
// device return their input unchanged. The work goes to the backend registered for the mesh's
// device type and process layout (runtime/backend_registry.h: in-process for a mesh in one
// process, the hierarchical composition with MPI for one spanning processes under mpirun).
//
// Every call that moves data is counted once in the process-wide CollectiveStats, whatever the
// number of groups, so tests can assert how many collectives an expansion emits.
//
// Thread-safety: the stats are atomic; registering backends must not race with collectives.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/mesh_backend.h"
#include "mesh/mesh.h"
#include "runtime/collective_backend.h"

namespace dtensor {

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kBarrier,
};
constexpr int kNumCollectiveKinds = 6;
std::string_view collective_kind_name(CollectiveKind kind);

struct CollectiveStats {
  std::array<int64_t, kNumCollectiveKinds> calls{};
  int64_t bytes = 0;  // bytes of the local input shards of counted calls

  int64_t count(CollectiveKind kind) const { return calls[static_cast<size_t>(kind)]; }
  int64_t total() const;
  // "all_reduce=1 all_to_all=2 bytes=4096", for test messages.
  std::string to_string() const;
};

CollectiveStats collective_stats();
void reset_collective_stats();

// One counted call, as a CollectiveListener hears it: its kind, the mesh dims its groups span
// (names joined by ',', in mesh order) and the bytes of its local input shards.
struct CollectiveRecord {
  CollectiveKind kind;
  std::string dims;
  int64_t bytes = 0;
};

// While alive, hears every collective the constructing thread makes that CollectiveStats counts
// (the innermost listener of the thread hears them), e.g. around one training step to see its
// collective budget (train/capture/collective_summary.h). Lives and dies on one thread.
class CollectiveListener {
 public:
  CollectiveListener();
  ~CollectiveListener();
  CollectiveListener(const CollectiveListener&) = delete;
  CollectiveListener& operator=(const CollectiveListener&) = delete;

  const std::vector<CollectiveRecord>& records() const { return records_; }

 private:
  friend void notify_collective_listener(const Mesh&, MeshDimMask, CollectiveKind, int64_t);
  std::vector<CollectiveRecord> records_;
  CollectiveListener* outer_;
};

std::vector<Tensor> all_reduce(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, ReduceOp op);
std::vector<Tensor> all_gather(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, int64_t axis);
std::vector<Tensor> reduce_scatter(const Mesh& mesh, MeshDimMask dims,
                                   const std::vector<Tensor>& shards, ReduceOp op, int64_t axis);
std::vector<Tensor> all_to_all(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, int64_t split_axis,
                               int64_t concat_axis);
// A bucket of all-reduces in flight (all_reduce_start); move-only. wait() finishes it.
class PendingAllReduce {
 public:
  PendingAllReduce() = default;
  PendingAllReduce(PendingAllReduce&&) = default;
  PendingAllReduce& operator=(PendingAllReduce&&) = default;

  // Lets the transport progress; true once every group is done. Never blocks.
  bool test();
  // Blocks until done and returns, per tensor of the bucket, its new local shards (as all_reduce
  // returns them). Called once.
  std::vector<std::vector<Tensor>> wait();

 private:
  friend PendingAllReduce all_reduce_start(const Mesh&, MeshDimMask,
                                           const std::vector<std::vector<Tensor>>&, ReduceOp);
  struct GroupInFlight {
    std::vector<size_t> local_indices;  // of the group's local members, in group order
    std::unique_ptr<PendingCollective> pending;
  };
  // A bucket started while a step is traced: its start and its wait are recorded as calls of the
  // captured program, which share this state, so that a replay overlaps as eager code does.
  struct Traced;
  std::vector<std::vector<Tensor>> wait_traced();
  std::shared_ptr<Traced> traced_;
  std::vector<GroupInFlight> groups_;
  std::vector<std::vector<Tensor>> done_;  // the results when nothing needed communication
  size_t num_tensors_ = 0, num_local_ = 0;
};

// Starts the all-reduce of several mesh-wide values at once (a bucket: tensors[t] holds value t's
// local shards) and returns while it runs, so that the caller can compute meanwhile: MPI reduces
// each group's bucket on its communication thread; backends that cannot overlap finish it here. The
// results equal all_reduce's on each value. Counted as one all-reduce in CollectiveStats. Every
// process makes the same starts in the same order, and waits for them in that order. While a step
// is traced (dtensor/step_observer.h), the start and the wait are each recorded, one call per
// value, so that the captured program starts the bucket and waits for it at the same points.
PendingAllReduce all_reduce_start(const Mesh& mesh, MeshDimMask dims,
                                  const std::vector<std::vector<Tensor>>& tensors, ReduceOp op);

// `root` is a position within each group.
std::vector<Tensor> broadcast(const Mesh& mesh, MeshDimMask dims, const std::vector<Tensor>& shards,
                              int64_t root);
void barrier(const Mesh& mesh);

}  // namespace dtensor
