// MirroredStrategy: synchronous data-parallel training in the style of tf.distribute, as a thin
// layer over a one-dim mesh `replica=N`.
//
// tf.distribute runs a step function once per replica and stitches per-replica values together.
// Here everything is SPMD already: a step function runs once, on global DTensors, and every op
// runs on all replicas. The strategy only fixes the layouts that make this data parallel:
//   - variables are replicated over the replica dim (create_variable, or any code that builds
//     them with replicated_layout(), e.g. keras::Dense inside scope());
//   - a distributed dataset's batches are sharded over the replica dim: replica r holds rows
//     [r*B/N, (r+1)*B/N) of each global batch of B examples (chunk semantics when N does not
//     divide B);
//   - a loss averaged over the global batch has a gradient that is a partial sum over the replica
//     dim for each replicated variable, reduced (all-reduced) once per variable when the tape
//     brings it to the variable's layout. That is tf.distribute's gradient all-reduce: no extra
//     code, and no averaging step to forget.
//
// Per-replica values. Inside run(), a value "per replica" is a DTensor read through its layout:
//   - partial sum over the replica dim: replica r holds one term (what reduce_sum over a
//     batch-sharded dim gives: the sum over that replica's examples);
//   - sharded over the replica dim along one tensor dim: replica r holds its shard (per-example
//     values of its slice of the batch; replica_id());
//   - replicated over it: every replica holds the same value.
// ReplicaContext::all_reduce and MirroredStrategy::reduce combine what the replicas hold, as
// tf.distribute's all_reduce and reduce do, and return a replicated DTensor.
//
// Ownership and threads: a MirroredStrategy is a small value (its mesh is shared, immutable);
// copies are the same strategy. Its const methods are thread-safe. scope() is per thread, like
// TF's: the innermost live Scope of the calling thread is current_strategy() on that thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "dtensor/variable.h"
#include "train/data/dataset.h"

namespace dtensor::keras {

// How all_reduce and reduce combine per-replica values (tf.distribute.ReduceOp).
enum class Reduction : uint8_t { kSum, kMean };

class MirroredStrategy;

// What a step function sees inside MirroredStrategy::run (tf.distribute.ReplicaContext).
class ReplicaContext {
 public:
  const MirroredStrategy& strategy() const { return *strategy_; }
  int64_t num_replicas_in_sync() const;
  // The id of each replica as a per-replica value: i32 [N] sharded over the replica dim, so
  // replica r holds [r].
  DTensor replica_id() const;
  // The sum (or mean) over replicas of what each replica holds of `value` (see the header
  // comment), replicated. Same as strategy().reduce(op, value).
  DTensor all_reduce(Reduction op, const DTensor& value) const;

 private:
  friend class MirroredStrategy;
  explicit ReplicaContext(const MirroredStrategy& strategy) : strategy_(&strategy) {}
  const MirroredStrategy* strategy_;
};

class MirroredStrategy {
 public:
  static constexpr const char* kReplicaDim = "replica";

  // One replica per available device: num_virtual_cpus() in each process times the number of
  // processes (create_mesh: collective across processes).
  MirroredStrategy();
  // `num_replicas` devices, split evenly over the processes (MeshError if they do not divide
  // it, InvalidArgumentError below 1). In one process these are virtual CPU devices; their
  // count need not match configure_virtual_cpus.
  explicit MirroredStrategy(int64_t num_replicas);
  // Over an existing mesh: replicas along `replica_dim` (InvalidArgumentError if the mesh has no
  // such dim). Other mesh dims, if any, hold copies of everything.
  MirroredStrategy(Mesh mesh, std::string replica_dim);

  int64_t num_replicas_in_sync() const { return mesh_.dim_size(replica_dim_); }
  const Mesh& mesh() const { return mesh_; }
  const std::string& replica_dim() const { return replica_dim_; }

  // Layouts of the strategy: everything replicated, or tensor dim `axis` split over replicas.
  Layout replicated_layout(int64_t rank) const { return Layout::replicated(mesh_, rank); }
  Layout batch_layout(int64_t rank, int64_t axis = 0) const {
    return Layout::batch_sharded(mesh_, replica_dim_, rank, axis);
  }

  // A variable replicated over the replicas, from a global value (stored once in this process)
  // or from a DTensor on this strategy's mesh in any layout (LayoutError for another mesh).
  DVariable create_variable(const Tensor& initial, std::string name) const;
  DVariable create_variable(const DTensor& initial, std::string name) const;

  // A dataset over `features` and `labels` whose batches give each replica its slice of the
  // global batch (tf's experimental_distribute_dataset). Configure it with the *global* batch
  // size: batch(per_replica_batch * num_replicas_in_sync()).
  data::Dataset distribute_dataset(Tensor features, Tensor labels) const;
  // The same over any example source (data::open_mnist_examples reads only this process's part).
  data::Dataset distribute_dataset(std::shared_ptr<const data::ExampleSource> examples) const;

  // Runs `fn(ReplicaContext&, args...)` once, SPMD: its ops run on every replica (tf's
  // strategy.run). Returns what fn returns.
  template <typename Fn, typename... Args>
  decltype(auto) run(Fn&& fn, Args&&... args) const {
    ReplicaContext context(*this);
    return std::forward<Fn>(fn)(context, std::forward<Args>(args)...);
  }

  // Combines a per-replica value over the replicas (tf's strategy.reduce with axis=None).
  // kMean needs a floating dtype (DTypeError). A value on another mesh is a MeshError; one that
  // is partial over the replica dim with max or min, or sharded over it along a dim the replicas
  // do not split evenly, is an InvalidArgumentError.
  DTensor reduce(Reduction op, const DTensor& per_replica) const;

  // While alive, makes this strategy current_strategy() on the calling thread. Scopes nest and
  // must be destroyed in reverse order of creation, on the thread that made them.
  class Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class MirroredStrategy;
    explicit Scope(const MirroredStrategy& strategy);
    const MirroredStrategy* previous_;
  };
  [[nodiscard]] Scope scope() const { return Scope(*this); }

 private:
  Mesh mesh_;
  std::string replica_dim_;
};

// The strategy of the innermost live scope() on this thread, or the default strategy: one
// replica on one CPU device (tf.distribute.get_strategy()). The reference stays valid while that
// scope lives (the default one for ever).
const MirroredStrategy& current_strategy();

// Sum of per-example losses divided by the global batch size (tf.nn.compute_average_loss): the
// loss whose gradient, all-reduced as a sum, is the gradient of the mean over the global batch.
// `global_batch_size` defaults (-1) to the size of dim 0 of `per_example_loss`.
DTensor compute_average_loss(const DTensor& per_example_loss, int64_t global_batch_size = -1);

}  // namespace dtensor::keras
