#include "dtensor/collectives.h"

#include <atomic>

#include "dtensor/mesh_backend.h"
#include "dtensor/step_observer.h"
#include "runtime/thread_pool.h"

namespace dtensor {
// Tells the thread's CollectiveListener, if any, of a counted call (defined below).
void notify_collective_listener(const Mesh& mesh, MeshDimMask dims, CollectiveKind kind,
                                int64_t bytes);

namespace {

struct AtomicStats {
  std::array<std::atomic<int64_t>, kNumCollectiveKinds> calls{};
  std::atomic<int64_t> bytes{0};
};

AtomicStats& stats() {
  static AtomicStats s;
  return s;
}

thread_local CollectiveListener* current_listener = nullptr;

void check_shards(const Mesh& mesh, const std::vector<Tensor>& shards, const char* function) {
  if (static_cast<int64_t>(shards.size()) != mesh.num_local_devices()) {
    throw_error<InvalidArgumentError>(function, "got {} shards for the {} local devices of mesh {}",
                                      shards.size(), mesh.num_local_devices(), mesh.dims_string());
  }
  for (const Tensor& t : shards) {
    if (t.dtype() != shards[0].dtype() || t.rank() != shards[0].rank()) {
      throw_error<ShapeError>(function, "shards {} and {} differ in dtype or rank",
                              shards[0].to_string(), t.to_string());
    }
  }
}

void check_axis(const std::vector<Tensor>& shards, int64_t axis, const char* function) {
  if (shards.empty()) return;
  if (axis < 0 || axis >= shards[0].rank()) {
    throw_error<ShapeError>(function, "axis {} is out of range for shard {}", axis,
                            shards[0].to_string());
  }
}

// Runs `call(backend, group, inputs)` on every group along `dims`, with the mesh's backend, and
// scatters the results back into local order. Groups run in parallel on the pool when the shards
// are large.
template <typename Call>
std::vector<Tensor> over_groups(const Mesh& mesh, MeshDimMask dims,
                                const std::vector<Tensor>& shards, CollectiveKind kind,
                                const char* function, Call&& call) {
  if (mesh.group_size(dims) == 1) return shards;
  CollectiveBackend& backend = collective_backend_for(mesh, function);
  AtomicStats& s = stats();
  s.calls[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
  int64_t bytes = 0;
  for (const Tensor& t : shards) bytes += static_cast<int64_t>(t.nbytes());
  s.bytes.fetch_add(bytes, std::memory_order_relaxed);
  notify_collective_listener(mesh, dims, kind, bytes);

  // The groups that hold at least one local device, each with its local members.
  std::vector<Group> groups;
  for (const auto& devices : mesh.groups(dims)) {
    Group g{devices, {}, mesh.process_index()};
    bool any_local = false;
    for (int64_t d : devices) {
      g.owners.push_back(mesh.owner_process(d));
      any_local = any_local || mesh.is_local(d);
    }
    if (any_local) groups.push_back(std::move(g));
  }
  std::vector<Tensor> out(shards.size());
  auto run_group = [&](int64_t gi) {
    const Group& g = groups[static_cast<size_t>(gi)];
    std::vector<Tensor> inputs;
    std::vector<int64_t> positions = g.local_positions();
    for (int64_t p : positions) {
      inputs.push_back(shards[static_cast<size_t>(mesh.local_index(g.devices[p]))]);
    }
    std::vector<Tensor> results = call(backend, g, inputs);
    for (size_t i = 0; i < positions.size(); ++i) {
      out[static_cast<size_t>(mesh.local_index(g.devices[positions[i]]))] = std::move(results[i]);
    }
  };
  // Groups spanning processes run one at a time, in the same order on every process: concurrent
  // blocking collectives issued in different orders could wait on each other across processes.
  constexpr int64_t kParallelBytes = 1 << 20;
  if (groups.size() > 1 && bytes >= kParallelBytes && mesh.num_processes() == 1) {
    ThreadPool::global().parallel_for(static_cast<int64_t>(groups.size()), run_group);
  } else {
    for (size_t gi = 0; gi < groups.size(); ++gi) run_group(static_cast<int64_t>(gi));
  }
  return out;
}

}  // namespace

std::string_view collective_kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all_reduce";
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kBarrier:
      return "barrier";
  }
  return "?";
}

int64_t CollectiveStats::total() const {
  int64_t n = 0;
  for (int64_t c : calls) n += c;
  return n;
}

std::string CollectiveStats::to_string() const {
  std::string s;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    if (calls[k] == 0) continue;
    s += fmt::format("{}={} ", collective_kind_name(static_cast<CollectiveKind>(k)), calls[k]);
  }
  return s + fmt::format("bytes={}", bytes);
}

void notify_collective_listener(const Mesh& mesh, MeshDimMask dims, CollectiveKind kind,
                                int64_t bytes) {
  if (current_listener == nullptr) return;
  std::string names;
  for (int64_t m = 0; m < mesh.rank(); ++m) {
    if (((dims >> m) & 1u) == 0) continue;
    names += (names.empty() ? "" : ",") + mesh.dims()[static_cast<size_t>(m)].name;
  }
  current_listener->records_.push_back({kind, std::move(names), bytes});
}

CollectiveListener::CollectiveListener() : outer_(current_listener) { current_listener = this; }
CollectiveListener::~CollectiveListener() { current_listener = outer_; }

CollectiveStats collective_stats() {
  CollectiveStats out;
  AtomicStats& s = stats();
  for (int k = 0; k < kNumCollectiveKinds; ++k) out.calls[k] = s.calls[k].load();
  out.bytes = s.bytes.load();
  return out;
}

void reset_collective_stats() {
  AtomicStats& s = stats();
  for (auto& c : s.calls) c.store(0);
  s.bytes.store(0);
}

std::vector<Tensor> all_reduce(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, ReduceOp op) {
  // Traced: the recorder runs and keeps this call (one thread-local load otherwise).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->shard_call("all_reduce", shards, [mesh, dims, op](const std::vector<Tensor>& s) {
      return all_reduce(mesh, dims, s, op);
    });
  }
  check_shards(mesh, shards, "all_reduce");
  return over_groups(mesh, dims, shards, CollectiveKind::kAllReduce, "all_reduce",
                     [&](CollectiveBackend& b, const Group& g, const std::vector<Tensor>& in) {
                       return b.all_reduce(g, in, op);
                     });
}

std::vector<Tensor> all_gather(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, int64_t axis) {
  // Traced: the recorder runs and keeps this call (one thread-local load otherwise).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->shard_call("all_gather", shards, [mesh, dims, axis](const std::vector<Tensor>& s) {
      return all_gather(mesh, dims, s, axis);
    });
  }
  check_shards(mesh, shards, "all_gather");
  check_axis(shards, axis, "all_gather");
  return over_groups(mesh, dims, shards, CollectiveKind::kAllGather, "all_gather",
                     [&](CollectiveBackend& b, const Group& g, const std::vector<Tensor>& in) {
                       return b.all_gather(g, in, axis);
                     });
}

std::vector<Tensor> reduce_scatter(const Mesh& mesh, MeshDimMask dims,
                                   const std::vector<Tensor>& shards, ReduceOp op, int64_t axis) {
  // Traced: the recorder runs and keeps this call (one thread-local load otherwise).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->shard_call("reduce_scatter", shards,
                            [mesh, dims, op, axis](const std::vector<Tensor>& s) {
                              return reduce_scatter(mesh, dims, s, op, axis);
                            });
  }
  check_shards(mesh, shards, "reduce_scatter");
  check_axis(shards, axis, "reduce_scatter");
  return over_groups(mesh, dims, shards, CollectiveKind::kReduceScatter, "reduce_scatter",
                     [&](CollectiveBackend& b, const Group& g, const std::vector<Tensor>& in) {
                       return b.reduce_scatter(g, in, op, axis);
                     });
}

std::vector<Tensor> all_to_all(const Mesh& mesh, MeshDimMask dims,
                               const std::vector<Tensor>& shards, int64_t split_axis,
                               int64_t concat_axis) {
  // Traced: the recorder runs and keeps this call (one thread-local load otherwise).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->shard_call("all_to_all", shards,
                            [mesh, dims, split_axis, concat_axis](const std::vector<Tensor>& s) {
                              return all_to_all(mesh, dims, s, split_axis, concat_axis);
                            });
  }
  check_shards(mesh, shards, "all_to_all");
  check_axis(shards, split_axis, "all_to_all");
  check_axis(shards, concat_axis, "all_to_all");
  return over_groups(mesh, dims, shards, CollectiveKind::kAllToAll, "all_to_all",
                     [&](CollectiveBackend& b, const Group& g, const std::vector<Tensor>& in) {
                       return b.all_to_all(g, in, split_axis, concat_axis);
                     });
}

std::vector<Tensor> broadcast(const Mesh& mesh, MeshDimMask dims, const std::vector<Tensor>& shards,
                              int64_t root) {
  // Traced: the recorder runs and keeps this call (one thread-local load otherwise).
  if (StepObserver* hook = StepObserver::active()) {
    return hook->shard_call("broadcast", shards, [mesh, dims, root](const std::vector<Tensor>& s) {
      return broadcast(mesh, dims, s, root);
    });
  }
  check_shards(mesh, shards, "broadcast");
  if (root < 0 || root >= mesh.group_size(dims)) {
    throw_error<InvalidArgumentError>("broadcast", "root {} is not a position in groups of {}",
                                      root, mesh.group_size(dims));
  }
  return over_groups(mesh, dims, shards, CollectiveKind::kBroadcast, "broadcast",
                     [&](CollectiveBackend& b, const Group& g, const std::vector<Tensor>& in) {
                       return b.broadcast(g, in, root);
                     });
}

// The state the recorded start and wait calls of one traced bucket share. A replay runs them in
// order: the starts fill `inputs` and start `pending`, the first wait finishes it into `results`
// and each wait takes its value's.
struct PendingAllReduce::Traced {
  std::vector<std::vector<Tensor>> values;  // the shards seen while tracing, for the waits' inputs
  std::vector<std::vector<Tensor>> inputs;
  PendingAllReduce pending;
  std::vector<std::vector<Tensor>> results;
};

PendingAllReduce all_reduce_start(const Mesh& mesh, MeshDimMask dims,
                                  const std::vector<std::vector<Tensor>>& tensors, ReduceOp op) {
  for (const std::vector<Tensor>& shards : tensors) check_shards(mesh, shards, "all_reduce_start");
  PendingAllReduce out;
  out.num_tensors_ = tensors.size();
  out.num_local_ = static_cast<size_t>(mesh.num_local_devices());
  // Traced: one recorded call per value hands it to the bucket, the last one starts it (here and
  // on every replay); wait() records the matching waits.
  StepObserver* hook = StepObserver::active();
  if (hook != nullptr && mesh.group_size(dims) > 1 && !tensors.empty()) {
    auto traced = std::make_shared<PendingAllReduce::Traced>();
    traced->values = tensors;
    traced->inputs.resize(tensors.size());
    for (size_t t = 0; t < tensors.size(); ++t) {
      hook->shard_call("all_reduce_start", tensors[t],
                       [traced, t, mesh, dims, op](const std::vector<Tensor>& shards) {
                         traced->inputs[t] = shards;
                         if (t + 1 == traced->inputs.size()) {
                           traced->pending = all_reduce_start(mesh, dims, traced->inputs, op);
                           for (std::vector<Tensor>& in : traced->inputs) in.clear();
                         }
                         return std::vector<Tensor>();
                       });
    }
    out.traced_ = std::move(traced);
    return out;
  }
  if (mesh.group_size(dims) == 1 || tensors.empty()) {
    out.done_ = tensors;
    return out;
  }
  CollectiveBackend& backend = collective_backend_for(mesh, "all_reduce_start");
  AtomicStats& s = stats();
  s.calls[static_cast<size_t>(CollectiveKind::kAllReduce)].fetch_add(1, std::memory_order_relaxed);
  int64_t bytes = 0;
  for (const std::vector<Tensor>& shards : tensors) {
    for (const Tensor& t : shards) bytes += static_cast<int64_t>(t.nbytes());
  }
  s.bytes.fetch_add(bytes, std::memory_order_relaxed);
  notify_collective_listener(mesh, dims, CollectiveKind::kAllReduce, bytes);
  // One start per group holding local devices, in group order (the same on every process).
  for (const auto& devices : mesh.groups(dims)) {
    Group g{devices, {}, mesh.process_index()};
    bool any_local = false;
    for (int64_t d : devices) {
      g.owners.push_back(mesh.owner_process(d));
      any_local = any_local || mesh.is_local(d);
    }
    if (!any_local) continue;
    PendingAllReduce::GroupInFlight flight;
    for (int64_t p : g.local_positions()) {
      flight.local_indices.push_back(static_cast<size_t>(mesh.local_index(g.devices[p])));
    }
    std::vector<std::vector<Tensor>> inputs(tensors.size());
    for (size_t t = 0; t < tensors.size(); ++t) {
      for (size_t i : flight.local_indices) inputs[t].push_back(tensors[t][i]);
    }
    flight.pending = backend.all_reduce_start(g, inputs, op);
    out.groups_.push_back(std::move(flight));
  }
  return out;
}

std::vector<std::vector<Tensor>> PendingAllReduce::wait_traced() {
  std::shared_ptr<Traced> traced = std::move(traced_);
  std::vector<std::vector<Tensor>> out;
  out.reserve(traced->values.size());
  // Recorded while tracing (the hook is active then); the waits read each value's slot, so the
  // program keeps it until the bucket is done.
  StepObserver* hook = StepObserver::active();
  for (size_t t = 0; t < traced->values.size(); ++t) {
    auto take = [traced, t](const std::vector<Tensor>&) {
      if (t == 0) traced->results = traced->pending.wait();
      return std::move(traced->results[t]);
    };
    out.push_back(hook != nullptr ? hook->shard_call("all_reduce_wait", traced->values[t], take)
                                  : take(traced->values[t]));
  }
  traced->values.clear();  // the trace's values are not kept alive by the program
  return out;
}

bool PendingAllReduce::test() {
  if (traced_) return traced_->pending.test();
  bool done = true;
  for (GroupInFlight& g : groups_) done = g.pending->test() && done;
  return done;
}

std::vector<std::vector<Tensor>> PendingAllReduce::wait() {
  if (traced_) return wait_traced();
  if (groups_.empty()) return std::move(done_);
  std::vector<std::vector<Tensor>> out(num_tensors_, std::vector<Tensor>(num_local_));
  for (GroupInFlight& g : groups_) {
    std::vector<std::vector<Tensor>> results = g.pending->wait();
    for (size_t t = 0; t < results.size(); ++t) {
      for (size_t i = 0; i < g.local_indices.size(); ++i) {
        out[t][g.local_indices[i]] = std::move(results[t][i]);
      }
    }
  }
  groups_.clear();
  return out;
}

void barrier(const Mesh& mesh) {
  if (StepObserver* hook = StepObserver::active()) {
    hook->shard_call("barrier", {}, [mesh](const std::vector<Tensor>&) {
      barrier(mesh);
      return std::vector<Tensor>();
    });
    return;
  }
  CollectiveBackend& backend = collective_backend_for(mesh, "barrier");
  stats().calls[static_cast<size_t>(CollectiveKind::kBarrier)].fetch_add(1);
  Group g{{}, {}, mesh.process_index()};
  for (int64_t d = 0; d < mesh.num_devices(); ++d) {
    g.devices.push_back(d);
    g.owners.push_back(mesh.owner_process(d));
  }
  backend.barrier(g);
}

}  // namespace dtensor
