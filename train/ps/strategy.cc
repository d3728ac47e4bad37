#include "train/ps/strategy.h"

#include <atomic>
#include <mutex>

#include "runtime/error.h"
#include "train/ps/tensor_proto.h"

namespace dtensor::ps {

struct ParameterServerStrategy::State {
  ClusterSpec spec;
  StrategyOptions options;
  std::vector<std::unique_ptr<rpc::ParameterServer::Stub>> ps;
  std::unique_ptr<TaskServer> server;
  mutable std::mutex mu;
  std::vector<ShardedVariable> variables;
  int64_t shards_placed = 0;
  std::optional<std::string> lost;
  std::atomic<int64_t> last_step_id{0};
  std::unique_ptr<Watchdog> watchdog;  // last: stops before the rest goes

  void call_ps(const char* fn, int64_t p, const grpc::Status& status) const {
    const TaskId task{TaskType::kPs, p};
    check_status(fn, status, task, spec.address(task));
  }

  rpc::StatsReply stats(const char* fn, size_t p) const {
    rpc::StatsRequest request;
    rpc::StatsReply reply;
    call_ps(fn, static_cast<int64_t>(p),
            ps[p]->Stats(with_deadline(options.rpc_timeout_s).get(), request, &reply));
    return reply;
  }

  void assign(const char* fn, std::vector<rpc::AssignRequest>& requests) const {
    for (size_t p = 0; p < requests.size(); ++p) {
      if (requests[p].shards_size() == 0) continue;
      requests[p].mutable_optimizer()->set_type(options.optimizer);
      requests[p].mutable_optimizer()->set_learning_rate(options.learning_rate);
      requests[p].mutable_optimizer()->set_cosine_decay_steps(options.lr_decay_steps);
      requests[p].mutable_optimizer()->set_cosine_decay_alpha(options.lr_decay_alpha);
      rpc::AssignReply reply;
      call_ps(fn, static_cast<int64_t>(p),
              ps[p]->Assign(with_deadline(options.rpc_timeout_s).get(), requests[p], &reply));
    }
  }
};

ParameterServerStrategy::ParameterServerStrategy(const ClusterSpec& cluster,
                                                 StrategyOptions options)
    : keras::Strategy("ParameterServerStrategy", Mesh::create({{kReplicaDim, 1}}, DeviceType::kCPU),
                      kReplicaDim),
      state_(std::make_shared<State>()) {
  State& s = *state_;
  s.spec = cluster.as_task({TaskType::kChief, 0});
  s.options = std::move(options);
  for (const std::string& a : s.spec.parameter_servers()) {
    s.ps.push_back(rpc::ParameterServer::NewStub(make_channel(a)));
  }
  for (int64_t p = 0; p < s.spec.num_ps(); ++p) {
    const TaskId task{TaskType::kPs, p};
    auto stub = rpc::Control::NewStub(make_channel(s.spec.address(task)));
    std::unique_ptr<grpc::ClientContext> context = with_deadline(s.options.connect_timeout_s);
    context->set_wait_for_ready(true);
    rpc::PingRequest request;
    rpc::PingReply reply;
    const grpc::Status status = stub->Ping(context.get(), request, &reply);
    if (!status.ok()) {
      throw_error<CommunicationError>(
          "ParameterServerStrategy", "{} at {} did not answer within {} s: {}", task.str(),
          s.spec.address(task), s.options.connect_timeout_s, status_text(status));
    }
  }
  if (s.options.serve_control) {
    s.server =
        std::make_unique<TaskServer>("chief:0", s.spec.chief(), std::vector<grpc::Service*>{});
  }
  std::vector<TaskId> servers;
  for (int64_t i = 0; i < s.spec.num_ps(); ++i) servers.push_back({TaskType::kPs, i});
  State* raw = state_.get();
  s.watchdog = std::make_unique<Watchdog>(s.spec, servers, s.options.watchdog,
                                          [raw](const TaskId&, const std::string& message) {
                                            std::lock_guard<std::mutex> lock(raw->mu);
                                            raw->lost = message;
                                          });
}

const ClusterSpec& ParameterServerStrategy::cluster() const { return state_->spec; }
const StrategyOptions& ParameterServerStrategy::options() const { return state_->options; }

ShardedVariable ParameterServerStrategy::create_sharded_variable(const Tensor& initial,
                                                                 const std::string& name) const {
  constexpr const char* kFn = "ParameterServerStrategy::create_sharded_variable";
  State& s = *state_;
  ShardedVariable var{name, initial.shape(), {}};
  std::vector<rpc::AssignRequest> requests(s.ps.size());
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (name.empty()) throw_error<InvalidArgumentError>(kFn, "empty variable name");
    for (const ShardedVariable& v : s.variables) {
      if (v.name == name) throw_error<InvalidArgumentError>(kFn, "variable '{}' exists", name);
    }
    const int64_t k = num_shards(s.options.partitioner, initial.shape(),
                                 static_cast<int64_t>(dtype_size(initial.dtype())));
    const int64_t rows = initial.rank() == 0 ? 1 : initial.dim(0);
    for (const RowRange& r : shard_rows(rows, k)) {
      rpc::ShardPlacement at;
      at.set_ps(s.shards_placed++ % s.spec.num_ps());
      at.set_row_offset(r.offset);
      at.set_rows(r.rows);
      rpc::ShardValue* shard = requests[static_cast<size_t>(at.ps())].add_shards();
      shard->set_name(var.shard_name(static_cast<int64_t>(var.shards.size())));
      to_proto(initial.rank() == 0 ? initial : slice_rows(initial, r.offset, r.rows),
               shard->mutable_value());
      var.shards.push_back(at);
    }
    s.variables.push_back(var);
  }
  s.assign(kFn, requests);
  return var;
}

std::vector<ShardedVariable> ParameterServerStrategy::sharded_variables() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->variables;
}

std::map<std::string, Tensor> ParameterServerStrategy::read_variables(bool with_slots,
                                                                      int64_t* step) const {
  constexpr const char* kFn = "ParameterServerStrategy::read_variables";
  const State& s = *state_;
  std::map<std::string, Tensor> shard_values;  // "<shard>" and "<shard>/<slot>"
  std::vector<std::string> slot_names;
  for (size_t p = 0; p < s.ps.size(); ++p) {
    rpc::PullRequest request;
    request.set_with_slots(with_slots);
    rpc::PullReply reply;
    s.call_ps(kFn, static_cast<int64_t>(p),
              s.ps[p]->Pull(with_deadline(s.options.rpc_timeout_s).get(), request, &reply));
    if (p == 0 && step != nullptr) *step = reply.version();
    for (const rpc::ShardValue& v : reply.shards()) {
      shard_values.emplace(v.name(), from_proto(v.value()));
      for (const auto& [slot, value] : v.slots()) {
        shard_values.emplace(v.name() + "/" + slot, from_proto(value));
        if (std::find(slot_names.begin(), slot_names.end(), slot) == slot_names.end()) {
          slot_names.push_back(slot);
        }
      }
    }
  }
  std::map<std::string, Tensor> out;
  for (const ShardedVariable& v : sharded_variables()) {
    std::vector<std::string> suffixes{""};
    for (const std::string& slot : slot_names) suffixes.push_back("/" + slot);
    for (const std::string& suffix : suffixes) {
      std::vector<Tensor> parts;
      for (size_t k = 0; k < v.shards.size(); ++k) {
        auto it = shard_values.find(v.shard_name(static_cast<int64_t>(k)) + suffix);
        if (it == shard_values.end()) break;
        parts.push_back(it->second);
      }
      if (parts.size() != v.shards.size()) {
        if (suffix.empty()) {
          throw_error<InvalidArgumentError>(kFn, "the servers hold {} of the {} shards of '{}'",
                                            parts.size(), v.shards.size(), v.name);
        }
        continue;  // a variable without this slot (not updated yet)
      }
      out.emplace(v.name + suffix, v.shape.empty() ? parts[0] : concat_rows(parts, v.shape));
    }
  }
  return out;
}

void ParameterServerStrategy::assign_variables(const std::map<std::string, Tensor>& values,
                                               int64_t step) const {
  constexpr const char* kFn = "ParameterServerStrategy::assign_variables";
  const State& s = *state_;
  std::vector<rpc::AssignRequest> requests(s.ps.size());
  for (rpc::AssignRequest& r : requests) r.set_step(step);
  for (const ShardedVariable& v : sharded_variables()) {
    auto value = values.find(v.name);
    if (value == values.end()) throw_error<InvalidArgumentError>(kFn, "no value for '{}'", v.name);
    if (value->second.shape() != v.shape) {
      throw_error<ShapeError>(kFn, "value of shape {} for variable '{}' of shape {}",
                              shape_to_string(value->second.shape()), v.name,
                              shape_to_string(v.shape));
    }
    const std::string prefix = v.name + "/";
    for (size_t k = 0; k < v.shards.size(); ++k) {
      const rpc::ShardPlacement& at = v.shards[k];
      auto slice = [&](const Tensor& t) {
        return v.shape.empty() ? t : slice_rows(t, at.row_offset(), at.rows());
      };
      rpc::ShardValue* shard = requests[static_cast<size_t>(at.ps())].add_shards();
      shard->set_name(v.shard_name(static_cast<int64_t>(k)));
      to_proto(slice(value->second), shard->mutable_value());
      for (auto it = values.lower_bound(prefix);
           it != values.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
        const std::string slot = it->first.substr(prefix.size());
        if (slot.find('/') != std::string::npos) continue;
        to_proto(slice(it->second), &(*shard->mutable_slots())[slot]);
      }
    }
  }
  s.assign(kFn, requests);
}

std::vector<int64_t> ParameterServerStrategy::staleness() const {
  const State& s = *state_;
  std::vector<int64_t> out;
  for (size_t p = 0; p < s.ps.size(); ++p) {
    const rpc::StatsReply reply = s.stats("ParameterServerStrategy::staleness", p);
    out.insert(out.end(), reply.staleness().begin(), reply.staleness().end());
  }
  return out;
}

std::vector<ParameterServerStrategy::PushCounts> ParameterServerStrategy::push_counts() const {
  const State& s = *state_;
  std::vector<PushCounts> out;
  for (size_t p = 0; p < s.ps.size(); ++p) {
    const rpc::StatsReply reply = s.stats("ParameterServerStrategy::push_counts", p);
    out.push_back({reply.applied_steps(), reply.duplicate_pushes()});
  }
  return out;
}

int64_t ParameterServerStrategy::next_step_id() const { return ++state_->last_step_id; }

std::optional<std::string> ParameterServerStrategy::lost_task() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->lost;
}

rpc::ParameterServer::Stub& ParameterServerStrategy::ps_stub(int64_t ps) const {
  return *state_->ps.at(static_cast<size_t>(ps));
}

}  // namespace dtensor::ps
