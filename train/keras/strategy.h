// Distribution strategies in the style of tf.distribute: one interface (Strategy) over
// MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy, OneDeviceStrategy and the
// default strategy, with tf.distribute's scope, replica context and cross-replica context.
//
// tf.distribute runs a step function once per replica and stitches per-replica values together.
// Here everything is SPMD already: a step function runs once, on global DTensors, and every op
// runs on all replicas. A strategy is a mesh with a replica dim (`replica=N`) and the layouts that
// make training on it data parallel:
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
//     values of its slice of the batch; replica_id_in_sync_group());
//   - replicated over it: every replica holds the same value.
// experimental_local_results lists what the local replicas hold; ReplicaContext::all_reduce,
// all_gather and Strategy::reduce combine it, as tf.distribute's do, into a replicated DTensor.
//
// Contexts (per thread, as in TF). Outside any scope the default strategy is current and the
// thread is in its default replica context: get_replica_context() is that context and
// in_cross_replica_context() is false. Inside scope() the thread is in cross-replica context
// (get_replica_context() is null). Inside run(fn) it is in the replica context run made, and
// get_strategy() is run's strategy; inside ReplicaContext::merge_call(fn) it is in cross-replica
// context again for fn's duration. Scopes of one strategy (or its copies) nest; entering another
// strategy's scope inside one is refused, as TF refuses mixing strategies.
//
// The strategies (see each class for what it means in layout terms):
//   MirroredStrategy             replica=N over the virtual CPU devices of every process
//   MultiWorkerMirroredStrategy  replica=W*L over L devices of each of the W processes of mpirun
//   CentralStorageStrategy       replica=N in this process, every variable stored once
//   OneDeviceStrategy            replica=1 on one device of this process
//
// Ownership and threads: a strategy is a small value (its mesh is shared, immutable); copies are
// the same strategy (their scopes nest). Const methods are thread-safe. Scopes and contexts are
// per thread and must be left in reverse order of entry, on the thread that entered them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/variable.h"
#include "train/data/dataset.h"

namespace dtensor::keras {

// How all_reduce and reduce combine per-replica values (tf.distribute.ReduceOp).
enum class Reduction : uint8_t { kSum, kMean };

class Strategy;
class DistributedDataset;

// What a step function sees inside Strategy::run (tf.distribute.ReplicaContext), and the default
// replica context outside any strategy (get_replica_context()). Not copyable: its identity is the
// context it stands for.
class ReplicaContext {
 public:
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  const Strategy& strategy() const { return *strategy_; }
  int64_t num_replicas_in_sync() const;
  // The id of each replica as a per-replica value: i32 [N] sharded over the replica dim, so
  // replica r holds [r].
  DTensor replica_id_in_sync_group() const;
  DTensor replica_id() const { return replica_id_in_sync_group(); }
  // The sum (or mean) over replicas of what each replica holds of `value` (see the header
  // comment), replicated. Same as strategy().reduce(op, value).
  DTensor all_reduce(Reduction op, const DTensor& value) const;
  // What the replicas hold of `value`, concatenated along `axis` in replica order and replicated:
  // shape [..., N * per-replica size along axis, ...]. InvalidArgumentError for an axis out of
  // range or a value split unevenly over the replicas; LayoutError if `axis` is split over
  // another mesh dim.
  DTensor all_gather(const DTensor& value, int64_t axis) const;

  // Runs fn(strategy(), args...) once, in cross-replica context, and returns its result to every
  // replica (tf's merge_call). InvalidArgumentError when this context is not the calling thread's
  // current replica context (inside a merge_call, or outside run).
  template <typename Fn, typename... Args>
  decltype(auto) merge_call(Fn&& fn, Args&&... args) const {
    MergeGuard guard(*this);
    return std::forward<Fn>(fn)(*strategy_, std::forward<Args>(args)...);
  }

 private:
  friend class Strategy;
  friend const ReplicaContext* get_replica_context();
  class MergeGuard {
   public:
    explicit MergeGuard(const ReplicaContext& context);
    ~MergeGuard();
    MergeGuard(const MergeGuard&) = delete;
    MergeGuard& operator=(const MergeGuard&) = delete;

   private:
    const ReplicaContext* saved_replica_;
    const Strategy* saved_merge_;
  };
  explicit ReplicaContext(const Strategy& strategy) : strategy_(&strategy) {}
  const Strategy* strategy_;
};

// What distribute_datasets_from_function hands the dataset function of each input pipeline
// (tf.distribute.InputContext). Here there is one pipeline per process.
class InputContext {
 public:
  // InvalidArgumentError unless 0 <= input_pipeline_id < num_input_pipelines and
  // num_replicas_in_sync >= 1.
  InputContext(int64_t num_input_pipelines = 1, int64_t input_pipeline_id = 0,
               int64_t num_replicas_in_sync = 1);

  int64_t num_input_pipelines() const { return num_input_pipelines_; }
  int64_t input_pipeline_id() const { return input_pipeline_id_; }
  int64_t num_replicas_in_sync() const { return num_replicas_in_sync_; }
  // global_batch_size / num_replicas_in_sync; InvalidArgumentError when it does not divide.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
  // A one-device mesh of this process, for the pipeline's own Dataset.
  static Mesh pipeline_mesh();

 private:
  int64_t num_input_pipelines_, input_pipeline_id_, num_replicas_in_sync_;
};

// Makes one input pipeline's dataset: its batches are per-replica batches.
using DatasetFn = std::function<data::Dataset(const InputContext&)>;

class Strategy {
 public:
  static constexpr const char* kReplicaDim = "replica";

  virtual ~Strategy();

  // "MirroredStrategy", ...: the class name, which also starts this strategy's error messages.
  const std::string& name() const { return name_; }
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
  data::Dataset experimental_distribute_dataset(Tensor features, Tensor labels) const;
  // The same over any example source (data::open_mnist_examples reads only this process's part).
  data::Dataset experimental_distribute_dataset(
      std::shared_ptr<const data::ExampleSource> examples) const;
  data::Dataset distribute_dataset(Tensor features, Tensor labels) const {
    return experimental_distribute_dataset(std::move(features), std::move(labels));
  }
  data::Dataset distribute_dataset(std::shared_ptr<const data::ExampleSource> examples) const {
    return experimental_distribute_dataset(std::move(examples));
  }
  // Calls `fn` once in this process with the InputContext of its pipeline (pipeline k of the
  // job's processes) and gives each local replica, in replica order, the next batch of the
  // dataset it returns (tf's distribute_datasets_from_function): batch it by
  // ctx.get_per_replica_batch_size(global), and shard the examples by input_pipeline_id.
  DistributedDataset distribute_datasets_from_function(const DatasetFn& fn) const;

  // Runs `fn(ReplicaContext&, args...)`, or `fn(args...)` when it takes no context, once, SPMD:
  // its ops run on every replica (tf's strategy.run), in this strategy's replica context. Returns
  // what fn returns. InvalidArgumentError inside another strategy's scope.
  template <typename Fn, typename... Args>
  decltype(auto) run(Fn&& fn, Args&&... args) const {
    ReplicaContext context(*this);
    RunGuard guard(context);
    if constexpr (std::is_invocable_v<Fn, ReplicaContext&, Args...>) {
      return std::forward<Fn>(fn)(context, std::forward<Args>(args)...);
    } else {
      return std::forward<Fn>(fn)(std::forward<Args>(args)...);
    }
  }

  // Combines a per-replica value over the replicas (tf's strategy.reduce with axis=None).
  // kMean needs a floating dtype (DTypeError). A value on another mesh is a MeshError; one that
  // is partial over the replica dim with max or min, or sharded over it along a dim the replicas
  // do not split evenly, is an InvalidArgumentError. The default strategy (one replica) returns
  // any value as it is.
  DTensor reduce(Reduction op, const DTensor& per_replica) const;
  // tf's reduce with an axis: each replica's value is reduced along `axis` too, so kSum is the
  // sum over the axis and the replicas, and kMean divides it by the number of elements along
  // `axis` over all replicas (the mean over a global batch, even when replicas hold uneven
  // slices). InvalidArgumentError for an axis outside [-rank, rank).
  DTensor reduce(Reduction op, const DTensor& per_replica, int64_t axis) const;
  // What each local replica holds of `value` (tf's experimental_local_results), in replica
  // order: a shard, a partial term, or the replicated value.
  std::vector<Tensor> experimental_local_results(const DTensor& value) const;

  // While alive, makes this strategy get_strategy() on the calling thread and puts it in
  // cross-replica context. InvalidArgumentError inside the scope of a different strategy.
  class Scope {
   public:
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend class Strategy;
    explicit Scope(const Strategy& strategy);
    const Strategy* previous_;
  };
  [[nodiscard]] Scope scope() const { return Scope(*this); }

  // Whether `other` is this strategy or a copy of it.
  bool same_as(const Strategy& other) const { return identity_ == other.identity_; }
  // The one replica of the default strategy: reduce and all_gather leave values as they are.
  bool is_default() const { return is_default_; }

 protected:
  // InvalidArgumentError (naming `name`) if `mesh` has no dim `replica_dim`.
  Strategy(std::string name, Mesh mesh, std::string replica_dim);
  Strategy(const Strategy&) = default;
  Strategy& operator=(const Strategy&) = default;

 private:
  friend class ReplicaContext;
  friend const Strategy& get_strategy();
  struct DefaultTag {};
  explicit Strategy(DefaultTag);

  class RunGuard {
   public:
    explicit RunGuard(const ReplicaContext& context);
    ~RunGuard();
    RunGuard(const RunGuard&) = delete;
    RunGuard& operator=(const RunGuard&) = delete;

   private:
    const ReplicaContext* saved_replica_;
    const Strategy* saved_merge_;
  };

  // `value` with the replica dim's share of it as local shards of a DTensor sharded along `axis`
  // over the replica dim (each replica's value in place of its chunk): the input of all_gather.
  DTensor replicas_along(const DTensor& value, int64_t axis, const std::string& fn) const;
  void check_mesh(const DTensor& value, const std::string& fn) const;

  std::string name_;
  Mesh mesh_;
  std::string replica_dim_;
  std::shared_ptr<const int> identity_;
  bool is_default_ = false;
};

// tf.distribute.MirroredStrategy: one replica per device, variables replicated (mirrored), the
// gradient all-reduced. The mesh may span the processes of an mpirun job (its default does), so
// it is also what MultiWorkerMirroredStrategy builds on.
class MirroredStrategy : public Strategy {
 public:
  // One replica per available device: num_virtual_cpus() in each process times the number of
  // processes.
  MirroredStrategy();
  // `num_replicas` devices, split evenly over the processes (MeshError if they do not divide
  // it, InvalidArgumentError below 1). In one process these are virtual CPU devices; their
  // count need not match configure_virtual_cpus.
  explicit MirroredStrategy(int64_t num_replicas);
  // Over an existing mesh: replicas along `replica_dim` (InvalidArgumentError if the mesh has no
  // such dim). Other mesh dims, if any, hold copies of everything.
  MirroredStrategy(Mesh mesh, std::string replica_dim);

 protected:
  MirroredStrategy(std::string name, Mesh mesh);
};

// tf.distribute.MultiWorkerMirroredStrategy: synchronous data parallelism over the processes
// (workers) of an mpirun job, each with the same number of local devices. The mesh replica=W*L
// spans every process's devices (process k owns replicas [k*L, (k+1)*L)); the gradient
// all-reduce runs locally, then across processes (the hierarchical collective backend). Every
// worker runs the same program; with one process it is a one-worker job.
class MultiWorkerMirroredStrategy : public MirroredStrategy {
 public:
  // num_virtual_cpus() replicas per worker.
  MultiWorkerMirroredStrategy();
  // InvalidArgumentError below 1.
  explicit MultiWorkerMirroredStrategy(int64_t replicas_per_worker);

  int64_t num_workers() const { return num_workers_; }
  int64_t worker_index() const { return worker_index_; }
  // Worker 0 (tf's cluster_resolver task 0): the one that writes summaries and logs.
  bool is_chief() const { return worker_index_ == 0; }

 private:
  int64_t num_workers_, worker_index_;
};

// tf.distribute.experimental.CentralStorageStrategy: compute mirrored over the devices of this
// process, variables stored on one device.
//
// In SPMD terms. TF places each variable on the CPU (or the one GPU), copies it to every replica
// when read and applies each update once, to that one copy. Here a DVariable's layout cannot be
// partial ("on device 0, zeros elsewhere"), and a per-device placement outside the mesh would
// make every read a cross-mesh copy. The layout that says "one value, read by every replica" is
// the replicated one, and on in-process devices replicated shards share one buffer: the variable
// is stored once and updated once, and every replica reads that storage. So this strategy is a
// process-local replica mesh with replicated variables, like TF's a single-machine strategy, and
// it computes exactly what MirroredStrategy on the same replicas computes (the same ops, layouts
// and reduction order). variable_device() names the device whose shard owns the storage.
class CentralStorageStrategy : public Strategy {
 public:
  // num_virtual_cpus() replicas.
  CentralStorageStrategy();
  // InvalidArgumentError below 1.
  explicit CentralStorageStrategy(int64_t num_replicas);

  // The device id (on mesh()) whose storage the variables live in: 0.
  int64_t variable_device() const { return 0; }
};

// tf.distribute.OneDeviceStrategy: one replica on one device of this process; reduce is the
// value itself, all_gather too.
class OneDeviceStrategy : public Strategy {
 public:
  OneDeviceStrategy();
};

// Batches of distribute_datasets_from_function: each local replica's batch comes from the
// pipeline's dataset, and a global batch is the replicas' batches in replica order, sharded over
// the replica dim. Movable, not copyable; not thread-safe.
class DistributedDataset {
 public:
  DistributedDataset(DistributedDataset&&) noexcept = default;
  DistributedDataset& operator=(DistributedDataset&&) noexcept = default;

  // The next global batch, or nullopt once the pipeline cannot give every local replica a batch.
  // InvalidArgumentError when the local replicas' batches differ in size (batch the pipeline
  // with drop_remainder, or a size that divides its examples).
  std::optional<data::Batch> next();
  const data::Dataset& pipeline() const { return pipeline_; }
  const InputContext& input_context() const { return context_; }

 private:
  friend class Strategy;
  DistributedDataset(Mesh mesh, std::string replica_dim, InputContext context,
                     data::Dataset pipeline);
  Mesh mesh_;
  std::string replica_dim_;
  InputContext context_;
  data::Dataset pipeline_;
  int64_t steps_ = 0;
};

// The strategy of the calling thread's replica context or innermost scope, or the default
// strategy: one replica on one CPU device (tf.distribute.get_strategy()). The reference stays
// valid while that scope or run lives (the default one for ever).
const Strategy& get_strategy();
inline const Strategy& current_strategy() { return get_strategy(); }
// True inside a scope (outside run) and inside merge_call; false in a replica context, and
// outside any scope (the default replica context).
bool in_cross_replica_context();
// The replica context of the run in progress on this thread; the default strategy's replica
// context outside any scope; nullptr in cross-replica context.
const ReplicaContext* get_replica_context();
// True inside a scope of a strategy other than the default one, or in its run.
bool has_strategy();

// Sum of per-example losses divided by the global batch size (tf.nn.compute_average_loss): the
// loss whose gradient, all-reduced as a sum, is the gradient of the mean over the global batch.
// `global_batch_size` defaults (-1) to the size of dim 0 of `per_example_loss`.
DTensor compute_average_loss(const DTensor& per_example_loss, int64_t global_batch_size = -1);

}  // namespace dtensor::keras
