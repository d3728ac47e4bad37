// The concrete strategies of strategy.h, InputContext and DistributedDataset.
#include <map>
#include <optional>

#include "dtensor/virtual_devices.h"
#include "runtime/error.h"
#include "runtime/process.h"
#include "train/keras/strategy.h"

namespace dtensor::keras {
namespace {

// `replicas` devices over the processes of the job (MeshError if they do not divide them).
Mesh replica_mesh(const char* fn, int64_t replicas) {
  if (replicas < 1) {
    throw_error<InvalidArgumentError>(fn, "need at least 1 replica, got {}", replicas);
  }
  const ProcessInfo process = this_process();
  return Mesh::create({{Strategy::kReplicaDim, replicas}}, DeviceType::kCPU, process.index,
                      process.count);
}

// `replicas` devices, all in this process.
Mesh local_replica_mesh(const char* fn, int64_t replicas) {
  if (replicas < 1) {
    throw_error<InvalidArgumentError>(fn, "need at least 1 replica, got {}", replicas);
  }
  return Mesh::create({{Strategy::kReplicaDim, replicas}}, DeviceType::kCPU);
}

}  // namespace

MirroredStrategy::MirroredStrategy()
    : Strategy("MirroredStrategy",
               create_mesh({{kReplicaDim, num_virtual_cpus() * this_process().count}}),
               kReplicaDim) {}

MirroredStrategy::MirroredStrategy(int64_t num_replicas)
    : Strategy("MirroredStrategy", replica_mesh("MirroredStrategy", num_replicas), kReplicaDim) {}

MirroredStrategy::MirroredStrategy(Mesh mesh, std::string replica_dim)
    : Strategy("MirroredStrategy", std::move(mesh), std::move(replica_dim)) {}

MirroredStrategy::MirroredStrategy(std::string name, Mesh mesh)
    : Strategy(std::move(name), std::move(mesh), kReplicaDim) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy()
    : MultiWorkerMirroredStrategy(num_virtual_cpus()) {}

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(int64_t replicas_per_worker)
    : MirroredStrategy(
          "MultiWorkerMirroredStrategy",
          replica_mesh("MultiWorkerMirroredStrategy",
                       replicas_per_worker < 1 ? replicas_per_worker
                                               : replicas_per_worker * this_process().count)),
      num_workers_(this_process().count),
      worker_index_(this_process().index) {}

CentralStorageStrategy::CentralStorageStrategy() : CentralStorageStrategy(num_virtual_cpus()) {}

CentralStorageStrategy::CentralStorageStrategy(int64_t num_replicas)
    : Strategy("CentralStorageStrategy", local_replica_mesh("CentralStorageStrategy", num_replicas),
               kReplicaDim) {}

OneDeviceStrategy::OneDeviceStrategy()
    : Strategy("OneDeviceStrategy", local_replica_mesh("OneDeviceStrategy", 1), kReplicaDim) {}

// ---------------------------------------------------------------------------------------------
// Input pipelines

InputContext::InputContext(int64_t num_input_pipelines, int64_t input_pipeline_id,
                           int64_t num_replicas_in_sync)
    : num_input_pipelines_(num_input_pipelines),
      input_pipeline_id_(input_pipeline_id),
      num_replicas_in_sync_(num_replicas_in_sync) {
  if (num_input_pipelines < 1 || input_pipeline_id < 0 ||
      input_pipeline_id >= num_input_pipelines) {
    throw_error<InvalidArgumentError>("InputContext",
                                      "input pipeline {} of {}: need 0 <= id < num_input_pipelines",
                                      input_pipeline_id, num_input_pipelines);
  }
  if (num_replicas_in_sync < 1) {
    throw_error<InvalidArgumentError>(
        "InputContext", "num_replicas_in_sync must be at least 1, got {}", num_replicas_in_sync);
  }
}

int64_t InputContext::get_per_replica_batch_size(int64_t global_batch_size) const {
  if (global_batch_size < 0 || global_batch_size % num_replicas_in_sync_ != 0) {
    throw_error<InvalidArgumentError>(
        "InputContext::get_per_replica_batch_size",
        "the global batch size {} is not divisible by num_replicas_in_sync {}", global_batch_size,
        num_replicas_in_sync_);
  }
  return global_batch_size / num_replicas_in_sync_;
}

Mesh InputContext::pipeline_mesh() { return Mesh::create({{"pipeline", 1}}, DeviceType::kCPU); }

DistributedDataset Strategy::distribute_datasets_from_function(const DatasetFn& fn) const {
  // One pipeline per process: a process feeds its own replicas (mesh processes own contiguous
  // blocks of replicas, in process order).
  const int64_t pipelines = mesh_.num_devices() / mesh_.num_local_devices();
  const int64_t id = mesh_.local_device_ids().front() / mesh_.num_local_devices();
  InputContext input(pipelines, id, num_replicas_in_sync());
  data::Dataset pipeline = fn(input);
  return DistributedDataset(mesh_, replica_dim_, input, std::move(pipeline));
}

DistributedDataset::DistributedDataset(Mesh mesh, std::string replica_dim, InputContext context,
                                       data::Dataset pipeline)
    : mesh_(std::move(mesh)),
      replica_dim_(std::move(replica_dim)),
      context_(context),
      pipeline_(std::move(pipeline)) {}

std::optional<data::Batch> DistributedDataset::next() {
  const char* fn = "DistributedDataset::next";
  const int64_t replica = mesh_.dim_index(replica_dim_);
  // One batch per local replica, in replica order; devices of one replica share it.
  std::map<int64_t, std::optional<data::Batch>> by_replica;
  for (int64_t device : mesh_.local_device_ids()) by_replica[mesh_.coord(device, replica)];
  int64_t size = -1, first_replica = -1, epoch = 0;
  for (auto& [r, batch] : by_replica) {
    std::optional<data::Batch> b = pipeline_.next();
    if (!b) return std::nullopt;
    if (size < 0) {
      size = b->size;
      first_replica = r;
      epoch = b->epoch;
    } else if (b->size != size) {
      throw_error<InvalidArgumentError>(
          fn,
          "replica {} got a batch of {} examples, replica {} one of {}; per-replica batches of "
          "one step must have one size (batch the pipeline with drop_remainder)",
          first_replica, size, r, b->size);
    }
    batch = std::move(b);
  }
  std::vector<Tensor> features, labels;
  for (int64_t device : mesh_.local_device_ids()) {
    const data::Batch& b = *by_replica.at(mesh_.coord(device, replica));
    features.push_back(to_global(b.features));
    labels.push_back(to_global(b.labels));
  }
  const int64_t n = mesh_.dim_size(replica_dim_);
  Shape shape = features.front().shape();
  shape[0] = size * n;
  DTensor batch_features(
      shape, DType::kF32,
      Layout::batch_sharded(mesh_, replica_dim_, static_cast<int64_t>(shape.size())),
      std::move(features));
  DTensor batch_labels({size * n}, DType::kI32, Layout::batch_sharded(mesh_, replica_dim_, 1),
                       std::move(labels));
  data::Batch out{std::move(batch_features), std::move(batch_labels), size * n, epoch, steps_++};
  return out;
}

}  // namespace dtensor::keras
