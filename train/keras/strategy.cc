#include "train/keras/strategy.h"

#include "dtensor/relayout.h"
#include "dtensor/virtual_devices.h"
#include "ops/ops.h"
#include "runtime/error.h"
#include "runtime/process.h"

namespace dtensor::keras {
namespace {

thread_local const MirroredStrategy* current = nullptr;

Mesh replica_mesh(int64_t num_replicas) {
  if (num_replicas < 1) {
    throw_error<InvalidArgumentError>("MirroredStrategy", "need at least 1 replica, got {}",
                                      num_replicas);
  }
  const ProcessInfo process = this_process();
  return Mesh::create({{MirroredStrategy::kReplicaDim, num_replicas}}, DeviceType::kCPU,
                      process.index, process.count);
}

}  // namespace

MirroredStrategy::MirroredStrategy()
    : mesh_(create_mesh({{kReplicaDim, num_virtual_cpus() * this_process().count}})),
      replica_dim_(kReplicaDim) {}

MirroredStrategy::MirroredStrategy(int64_t num_replicas)
    : mesh_(replica_mesh(num_replicas)), replica_dim_(kReplicaDim) {}

MirroredStrategy::MirroredStrategy(Mesh mesh, std::string replica_dim)
    : mesh_(std::move(mesh)), replica_dim_(std::move(replica_dim)) {
  if (!mesh_.has_dim(replica_dim_)) {
    throw_error<InvalidArgumentError>("MirroredStrategy", "mesh {} has no dim '{}'",
                                      mesh_.dims_string(), replica_dim_);
  }
}

DVariable MirroredStrategy::create_variable(const Tensor& initial, std::string name) const {
  return DVariable(distribute(initial, replicated_layout(initial.rank())), std::move(name));
}

DVariable MirroredStrategy::create_variable(const DTensor& initial, std::string name) const {
  if (initial.mesh() != mesh_) {
    throw_error<LayoutError>("MirroredStrategy::create_variable",
                             "initial value of '{}' {} lives on mesh {}, the strategy on {}", name,
                             initial.short_string(), initial.mesh().dims_string(),
                             mesh_.dims_string());
  }
  return DVariable(relayout(initial, replicated_layout(initial.rank())), std::move(name));
}

data::Dataset MirroredStrategy::distribute_dataset(Tensor features, Tensor labels) const {
  return data::Dataset(std::move(features), std::move(labels), mesh_, replica_dim_);
}

data::Dataset MirroredStrategy::distribute_dataset(
    std::shared_ptr<const data::ExampleSource> examples) const {
  return data::Dataset(std::move(examples), mesh_, replica_dim_);
}

DTensor MirroredStrategy::reduce(Reduction op, const DTensor& value) const {
  const char* fn = "MirroredStrategy::reduce";
  if (value.mesh() != mesh_) {
    throw_error<MeshError>(fn, "value {} lives on mesh {}, the strategy on {}",
                           value.short_string(), value.mesh().dims_string(), mesh_.dims_string());
  }
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

int64_t ReplicaContext::num_replicas_in_sync() const { return strategy_->num_replicas_in_sync(); }

DTensor ReplicaContext::replica_id() const {
  const Mesh& mesh = strategy_->mesh();
  const int64_t replica = mesh.dim_index(strategy_->replica_dim());
  std::vector<Tensor> ids;
  for (int64_t device : mesh.local_device_ids()) {
    Tensor id = Tensor::empty({1}, DType::kI32, mesh_device(mesh, device));
    id.data<int32_t>()[0] = static_cast<int32_t>(mesh.coord(device, replica));
    ids.push_back(id);
  }
  return DTensor({num_replicas_in_sync()}, DType::kI32, strategy_->batch_layout(1), ids);
}

DTensor ReplicaContext::all_reduce(Reduction op, const DTensor& value) const {
  return strategy_->reduce(op, value);
}

MirroredStrategy::Scope::Scope(const MirroredStrategy& strategy) : previous_(current) {
  current = &strategy;
}

MirroredStrategy::Scope::~Scope() { current = previous_; }

const MirroredStrategy& current_strategy() {
  if (current != nullptr) return *current;
  static const MirroredStrategy default_strategy(
      Mesh::create({{MirroredStrategy::kReplicaDim, 1}}, DeviceType::kCPU),
      MirroredStrategy::kReplicaDim);
  return default_strategy;
}

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
