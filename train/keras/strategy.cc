#include "train/keras/strategy.h"

#include <fmt/format.h>

#include <cmath>

#include "dtensor/host_copy.h"
#include "dtensor/relayout.h"
#include "ops/ops.h"
#include "runtime/error.h"

namespace dtensor::keras {
namespace {

// The calling thread's distribution context (see the header comment).
struct ThreadContext {
  const Strategy* scope = nullptr;          // innermost scope() entered
  const ReplicaContext* replica = nullptr;  // run() in progress
  const Strategy* merge = nullptr;          // merge_call() in progress: its strategy
};
thread_local ThreadContext context;

std::string describe(const Strategy& s) {
  return fmt::format("{} on mesh {}", s.name(), s.mesh().dims_string());
}

int64_t normalized_axis(int64_t axis, const DTensor& value, const std::string& fn) {
  const int64_t rank = value.rank();
  if (axis < -rank || axis >= rank) {
    throw_error<InvalidArgumentError>(fn, "axis {} is out of range for {} (rank {})", axis,
                                      value.short_string(), rank);
  }
  return axis < 0 ? axis + rank : axis;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Strategy

Strategy::Strategy(std::string name, Mesh mesh, std::string replica_dim)
    : name_(std::move(name)),
      mesh_(std::move(mesh)),
      replica_dim_(std::move(replica_dim)),
      identity_(std::make_shared<const int>(0)) {
  if (!mesh_.has_dim(replica_dim_)) {
    throw_error<InvalidArgumentError>(name_, "mesh {} has no dim '{}'", mesh_.dims_string(),
                                      replica_dim_);
  }
}

Strategy::Strategy(DefaultTag)
    : Strategy("DefaultStrategy", Mesh::create({{kReplicaDim, 1}}, DeviceType::kCPU), kReplicaDim) {
  is_default_ = true;
}

Strategy::~Strategy() = default;

void Strategy::check_mesh(const DTensor& value, const std::string& fn) const {
  if (value.mesh() != mesh_) {
    const auto [value_mesh, strategy_mesh] = distinct_mesh_strings(value.mesh(), mesh_);
    throw_error<MeshError>(fn, "value {} lives on mesh {}, the strategy on {}",
                           value.short_string(), value_mesh, strategy_mesh);
  }
}

DVariable Strategy::create_variable(const Tensor& initial, std::string name) const {
  return DVariable(distribute(initial, replicated_layout(initial.rank())), std::move(name));
}

DVariable Strategy::create_variable(const DTensor& initial, std::string name) const {
  if (initial.mesh() != mesh_) {
    const auto [value_mesh, strategy_mesh] = distinct_mesh_strings(initial.mesh(), mesh_);
    throw_error<LayoutError>(name_ + "::create_variable",
                             "initial value of '{}' {} lives on mesh {}, the strategy on {}", name,
                             initial.short_string(), value_mesh, strategy_mesh);
  }
  return DVariable(relayout(initial, replicated_layout(initial.rank())), std::move(name));
}

data::Dataset Strategy::experimental_distribute_dataset(Tensor features, Tensor labels) const {
  return data::Dataset(std::move(features), std::move(labels), mesh_, replica_dim_);
}

data::Dataset Strategy::experimental_distribute_dataset(
    std::shared_ptr<const data::ExampleSource> examples) const {
  return data::Dataset(std::move(examples), mesh_, replica_dim_);
}

DTensor Strategy::reduce(Reduction op, const DTensor& value) const {
  const std::string fn = name_ + "::reduce";
  if (is_default_) return value;
  check_mesh(value, fn);
  if (op == Reduction::kMean && !is_floating(value.dtype())) {
    throw_error<DTypeError>(fn, "the mean of {} over replicas needs a floating dtype",
                            value.short_string());
  }
  const Layout& layout = value.layout();
  const int64_t replica = mesh_.dim_index(replica_dim_);
  const int64_t n = num_replicas_in_sync();
  // Each replica's local value becomes its term of a sum over the replica dim.
  std::vector<PartialDim> partial;
  bool already_partial = false;
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim != replica_dim_) {
      partial.push_back(p);
      continue;
    }
    if (p.op != ReduceOp::kSum) {
      throw_error<InvalidArgumentError>(
          fn, "value {} is a pending {} over '{}'; only partial sums combine by sum or mean",
          value.short_string(), reduce_op_name(p.op), replica_dim_);
    }
    already_partial = true;
  }
  DTensor terms = value;
  if (!already_partial) {
    std::vector<std::string> specs = layout.sharding_specs();
    Shape shape = value.shape();
    const int64_t axis = layout.tensor_dim_of(replica);
    if (axis >= 0) {
      // Sharded over replicas: replica r's value is its shard, so they must all be one shape.
      if (shape[axis] % n != 0) {
        throw_error<InvalidArgumentError>(
            fn,
            "value {} is split unevenly over {} replicas along dim {}; per-replica values "
            "must have one shape",
            value.short_string(), n, axis);
      }
      shape[axis] /= n;
      specs[axis] = Layout::kUnsharded;
    }
    partial.push_back({replica_dim_, ReduceOp::kSum});
    terms = DTensor(shape, value.dtype(), Layout(specs, mesh_, partial), value.shards());
  }
  std::vector<PartialDim> rest;
  for (const PartialDim& p : terms.layout().partial()) {
    if (p.mesh_dim != replica_dim_) rest.push_back(p);
  }
  DTensor sum = relayout(terms, terms.layout().with_partial(rest));
  return op == Reduction::kMean ? scale(sum, 1.0 / static_cast<double>(n)) : sum;
}

DTensor Strategy::reduce(Reduction op, const DTensor& value, int64_t axis) const {
  const std::string fn = name_ + "::reduce";
  const int64_t a = normalized_axis(axis, value, fn);
  if (is_default_) return op == Reduction::kSum ? reduce_sum(value, {a}) : reduce_mean(value, {a});
  check_mesh(value, fn);
  if (op == Reduction::kMean && !is_floating(value.dtype())) {
    throw_error<DTypeError>(fn, "the mean of {} over replicas needs a floating dtype",
                            value.short_string());
  }
  // Along the dim split over replicas, the replicas' values concatenated are the global value:
  // the global sum over it is already the sum over replicas (partial until reduced), and the
  // count is the global size, however unevenly the replicas split it. Along any other dim each
  // replica sums its own value, then the replicas' sums add up.
  const int64_t replica_axis = value.layout().tensor_dim_of(mesh_.dim_index(replica_dim_));
  const int64_t count =
      replica_axis == a ? value.shape()[a] : value.shape()[a] * num_replicas_in_sync();
  DTensor sum = reduce(Reduction::kSum, reduce_sum(value, {a}));
  if (op == Reduction::kSum) return sum;
  return count == 0 ? scale(sum, std::nan("")) : scale(sum, 1.0 / static_cast<double>(count));
}

std::vector<Tensor> Strategy::experimental_local_results(const DTensor& value) const {
  const std::string fn = name_ + "::experimental_local_results";
  if (is_default_) return {to_global(value)};
  check_mesh(value, fn);
  // Other mesh dims hold copies (or parts) of each replica's value: bring them together first.
  const int64_t replica = mesh_.dim_index(replica_dim_);
  std::vector<std::string> specs = value.layout().sharding_specs();
  for (std::string& s : specs) {
    if (s != replica_dim_) s = Layout::kUnsharded;
  }
  std::vector<PartialDim> partial;
  for (const PartialDim& p : value.layout().partial()) {
    if (p.mesh_dim == replica_dim_) partial.push_back(p);
  }
  const DTensor per_replica = relayout(value, Layout(specs, mesh_, partial));
  std::vector<Tensor> out;
  const std::vector<int64_t>& local = mesh_.local_device_ids();
  for (size_t i = 0; i < local.size(); ++i) {
    bool first_copy = true;
    for (int64_t d = 0; d < mesh_.rank(); ++d) {
      if (d != replica && mesh_.coord(local[i], d) != 0) first_copy = false;
    }
    if (first_copy) out.push_back(per_replica.shards()[i]);
  }
  return out;
}

DTensor Strategy::replicas_along(const DTensor& value, int64_t axis, const std::string& fn) const {
  check_mesh(value, fn);
  const Layout& layout = value.layout();
  const int64_t n = num_replicas_in_sync();
  std::vector<std::string> specs = layout.sharding_specs();
  Shape shape = value.shape();
  const int64_t replica_axis = layout.tensor_dim_of(mesh_.dim_index(replica_dim_));
  if (replica_axis >= 0) {
    if (shape[replica_axis] % n != 0) {
      throw_error<InvalidArgumentError>(
          fn,
          "value {} is split unevenly over {} replicas along dim {}; per-replica values must "
          "have one shape",
          value.short_string(), n, replica_axis);
    }
    shape[replica_axis] /= n;
    specs[replica_axis] = Layout::kUnsharded;
  }
  if (specs[axis] != Layout::kUnsharded) {
    throw_error<LayoutError>(fn, "value {}: dim {} is split over mesh dim '{}', not only '{}'",
                             value.short_string(), axis, specs[axis], replica_dim_);
  }
  specs[axis] = replica_dim_;
  shape[axis] *= n;
  std::vector<PartialDim> partial;
  for (const PartialDim& p : layout.partial()) {
    if (p.mesh_dim != replica_dim_) partial.push_back(p);
  }
  // Each device's shard is its replica's value, which is exactly its chunk along `axis` now.
  return DTensor::from_trusted_shards(shape, value.dtype(), Layout(specs, mesh_, partial),
                                      value.shards());
}

// ---------------------------------------------------------------------------------------------
// Scopes and contexts

Strategy::Scope::Scope(const Strategy& strategy) : previous_(context.scope) {
  const Strategy& current = get_strategy();
  if (!current.same_as(strategy) && !current.is_default()) {
    throw_error<InvalidArgumentError>(
        "Strategy::scope",
        "cannot enter the scope of {} inside the scope of {}: strategies do not mix",
        describe(strategy), describe(current));
  }
  if (!strategy.is_default()) context.scope = &strategy;
}

Strategy::Scope::~Scope() { context.scope = previous_; }

Strategy::RunGuard::RunGuard(const ReplicaContext& replica)
    : saved_replica_(context.replica), saved_merge_(context.merge) {
  const Strategy& current = get_strategy();
  const Strategy& strategy = replica.strategy();
  if (!current.same_as(strategy) && !current.is_default()) {
    throw_error<InvalidArgumentError>(strategy.name() + "::run",
                                      "cannot run {} inside the scope of {}: strategies do not mix",
                                      describe(strategy), describe(current));
  }
  context.replica = &replica;
  context.merge = nullptr;
}

Strategy::RunGuard::~RunGuard() {
  context.replica = saved_replica_;
  context.merge = saved_merge_;
}

ReplicaContext::MergeGuard::MergeGuard(const ReplicaContext& replica)
    : saved_replica_(context.replica), saved_merge_(context.merge) {
  if (get_replica_context() != &replica) {
    if (in_cross_replica_context()) {
      throw_error<InvalidArgumentError>(
          "ReplicaContext::merge_call",
          "called in cross-replica context ({}); call it in the replica context of run",
          describe(get_strategy()));
    }
    throw_error<InvalidArgumentError>(
        "ReplicaContext::merge_call",
        "this replica context of {} is not the current one; call merge_call on the context run "
        "gave",
        describe(replica.strategy()));
  }
  context.replica = nullptr;
  context.merge = &replica.strategy();
}

ReplicaContext::MergeGuard::~MergeGuard() {
  context.replica = saved_replica_;
  context.merge = saved_merge_;
}

const Strategy& get_strategy() {
  if (context.merge != nullptr) return *context.merge;
  if (context.replica != nullptr) return context.replica->strategy();
  if (context.scope != nullptr) return *context.scope;
  static const Strategy* const default_one = new Strategy(Strategy::DefaultTag{});
  return *default_one;
}

bool in_cross_replica_context() {
  return context.merge != nullptr || (context.replica == nullptr && context.scope != nullptr);
}

const ReplicaContext* get_replica_context() {
  if (context.merge != nullptr) return nullptr;
  if (context.replica != nullptr) return context.replica;
  if (context.scope != nullptr) return nullptr;
  static const ReplicaContext* const default_context = new ReplicaContext(get_strategy());
  return default_context;
}

bool has_strategy() { return !get_strategy().is_default(); }

// ---------------------------------------------------------------------------------------------
// ReplicaContext

int64_t ReplicaContext::num_replicas_in_sync() const { return strategy_->num_replicas_in_sync(); }

DTensor ReplicaContext::replica_id_in_sync_group() const {
  const Mesh& mesh = strategy_->mesh();
  const int64_t replica = mesh.dim_index(strategy_->replica_dim());
  std::vector<Tensor> ids;
  for (int64_t device : mesh.local_device_ids()) {
    Tensor id = Tensor::empty({1}, DType::kI32);  // written on the host, then put on the device
    id.data<int32_t>()[0] = static_cast<int32_t>(mesh.coord(device, replica));
    ids.push_back(on_device(id, mesh_device(mesh, device)));
  }
  return DTensor({num_replicas_in_sync()}, DType::kI32, strategy_->batch_layout(1), ids);
}

DTensor ReplicaContext::all_reduce(Reduction op, const DTensor& value) const {
  return strategy_->reduce(op, value);
}

DTensor ReplicaContext::all_gather(const DTensor& value, int64_t axis) const {
  const std::string fn = "ReplicaContext::all_gather";
  const int64_t a = normalized_axis(axis, value, fn);
  if (strategy_->is_default()) return value;
  const DTensor along = strategy_->replicas_along(value, a, fn);
  std::vector<std::string> specs = along.layout().sharding_specs();
  specs[a] = Layout::kUnsharded;
  return relayout(along, Layout(specs, along.mesh(), along.layout().partial()));
}

// ---------------------------------------------------------------------------------------------

DTensor compute_average_loss(const DTensor& per_example_loss, int64_t global_batch_size) {
  if (per_example_loss.rank() < 1) {
    throw_error<ShapeError>("compute_average_loss", "per-example loss {} has no batch dim",
                            per_example_loss.short_string());
  }
  const int64_t n = global_batch_size < 0 ? per_example_loss.shape()[0] : global_batch_size;
  if (n < 1) {
    throw_error<InvalidArgumentError>("compute_average_loss",
                                      "global batch size must be at least 1, got {}", n);
  }
  return scale(reduce_sum(per_example_loss), 1.0 / static_cast<double>(n));
}

}  // namespace dtensor::keras
