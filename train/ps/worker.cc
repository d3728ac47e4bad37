#include "train/ps/worker.h"

#include <chrono>

#include "runtime/error.h"
#include "train/ps/tensor_proto.h"

namespace dtensor::ps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_new(const char* fn, const std::string& name, bool taken) {
  if (name.empty()) throw_error<InvalidArgumentError>(fn, "empty name");
  if (taken) throw_error<InvalidArgumentError>(fn, "'{}' is registered already", name);
}

// Throws for a failed RPC to parameter server `ps` (see check_status).
void check_ps_status(const char* fn, const grpc::Status& status, size_t ps,
                     const std::string& address) {
  check_status(fn, status, TaskId{TaskType::kPs, static_cast<int64_t>(ps)}, address);
}

}  // namespace

void FunctionRegistry::add_function(const std::string& name, Function fn) {
  check_new("FunctionRegistry::add_function", name, functions_.count(name) > 0);
  functions_.emplace(name, std::move(fn));
}

void FunctionRegistry::add_dataset(const std::string& name, keras::DatasetFn fn) {
  check_new("FunctionRegistry::add_dataset", name, datasets_.count(name) > 0);
  datasets_.emplace(name, std::move(fn));
}

const FunctionRegistry::Function* FunctionRegistry::function(const std::string& name) const {
  auto it = functions_.find(name);
  return it == functions_.end() ? nullptr : &it->second;
}

const keras::DatasetFn* FunctionRegistry::dataset(const std::string& name) const {
  auto it = datasets_.find(name);
  return it == datasets_.end() ? nullptr : &it->second;
}

std::map<std::string, Tensor> WorkerContext::pull() {
  const Clock::time_point start = Clock::now();
  std::map<std::string, Tensor> shards;
  pulled_versions_.assign(ps_.size(), 0);
  for (size_t p = 0; p < ps_.size(); ++p) {
    rpc::PullRequest request;
    rpc::PullReply reply;
    check_ps_status("WorkerContext::pull",
                    ps_[p]->Pull(with_deadline(rpc_timeout_s_).get(), request, &reply), p,
                    ps_addresses_[p]);
    pulled_versions_[p] = reply.version();
    for (const rpc::ShardValue& s : reply.shards()) shards.emplace(s.name(), from_proto(s.value()));
  }
  std::map<std::string, Tensor> out;
  for (const rpc::VariableSpec& v : variables_) {
    std::vector<Tensor> parts;
    for (int k = 0; k < v.shards_size(); ++k) {
      auto it = shards.find(v.name() + "/part_" + std::to_string(k));
      if (it == shards.end()) {
        throw_error<InvalidArgumentError>("WorkerContext::pull", "no server holds '{}/part_{}'",
                                          v.name(), k);
      }
      parts.push_back(it->second);
    }
    out.emplace(v.name(), concat_rows(parts, Shape(v.shape().begin(), v.shape().end())));
  }
  timing_.rpc_seconds += seconds_since(start);
  return out;
}

void WorkerContext::push(const std::map<std::string, Tensor>& gradients) {
  const Clock::time_point start = Clock::now();
  std::vector<rpc::PushRequest> requests(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    requests[p].set_pulled_version(p < pulled_versions_.size() ? pulled_versions_[p] : 0);
    requests[p].set_step_id(step_id_);
    requests[p].set_push_index(pushes_);
  }
  ++pushes_;
  for (const auto& [name, grad] : gradients) {
    const rpc::VariableSpec* spec = nullptr;
    for (const rpc::VariableSpec& v : variables_) {
      if (v.name() == name) spec = &v;
    }
    if (spec == nullptr) {
      throw_error<InvalidArgumentError>("WorkerContext::push", "no variable '{}'", name);
    }
    const Shape shape(spec->shape().begin(), spec->shape().end());
    if (grad.shape() != shape) {
      throw_error<InvalidArgumentError>(
          "WorkerContext::push", "gradient of shape {} for variable '{}' of shape {}",
          shape_to_string(grad.shape()), name, shape_to_string(shape));
    }
    for (int k = 0; k < spec->shards_size(); ++k) {
      const rpc::ShardPlacement& at = spec->shards(k);
      rpc::ShardValue* g = requests[static_cast<size_t>(at.ps())].add_gradients();
      g->set_name(name + "/part_" + std::to_string(k));
      to_proto(slice_rows(grad, at.row_offset(), at.rows()), g->mutable_value());
    }
  }
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (requests[p].gradients_size() == 0) continue;
    rpc::PushReply reply;
    check_ps_status("WorkerContext::push",
                    ps_[p]->Push(with_deadline(rpc_timeout_s_).get(), requests[p], &reply), p,
                    ps_addresses_[p]);
    if (reply.duplicate()) ++duplicate_pushes_;
  }
  timing_.rpc_seconds += seconds_since(start);
}

data::Dataset& WorkerContext::dataset(const std::string& name) {
  auto it = datasets_.find(name);
  if (it == datasets_.end()) {
    throw_error<InvalidArgumentError>(
        "WorkerContext::dataset", "no per-worker dataset '{}' on worker:{}", name, worker_index_);
  }
  return it->second;
}

WorkerService::WorkerService(const FunctionRegistry& registry, double rpc_timeout_s)
    : registry_(registry) {
  context_.rpc_timeout_s_ = rpc_timeout_s;
}

grpc::Status WorkerService::Configure(grpc::ServerContext*, const rpc::ConfigureRequest* request,
                                      rpc::ConfigureReply*) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : request->datasets()) {
    if (registry_.dataset(name) == nullptr) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "[Worker::Configure] no dataset function '" + name + "' registered");
    }
  }
  WorkerContext& c = context_;
  c.worker_index_ = request->worker_index();
  c.num_workers_ = request->num_workers();
  c.variables_.assign(request->variables().begin(), request->variables().end());
  if (c.ps_addresses_ !=
      std::vector<std::string>(request->ps_addresses().begin(), request->ps_addresses().end())) {
    c.ps_addresses_.assign(request->ps_addresses().begin(), request->ps_addresses().end());
    c.ps_.clear();
    for (const std::string& a : c.ps_addresses_) {
      c.ps_.push_back(rpc::ParameterServer::NewStub(make_channel(a)));
    }
  }
  try {
    for (const std::string& name : request->datasets()) {
      if (c.datasets_.count(name) > 0) continue;
      const keras::InputContext input(c.num_workers_, c.worker_index_, c.num_workers_);
      c.datasets_.emplace(name, (*registry_.dataset(name))(input));
    }
  } catch (const Error& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  }
  generation_ = request->generation();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Run(grpc::ServerContext*, const rpc::RunRequest* request,
                                rpc::RunReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request->generation() != generation_) {
    return grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "[Worker::Run] not configured for generation " + std::to_string(request->generation()));
  }
  const FunctionRegistry::Function* fn = registry_.function(request->function());
  if (fn == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "[Worker::Run] no function '" + request->function() + "' registered");
  }
  const Clock::time_point start = Clock::now();
  context_.timing_ = {};
  context_.step_id_ = request->step_id();
  context_.pushes_ = 0;
  context_.duplicate_pushes_ = 0;
  try {
    reply->set_result((*fn)(context_, request->args()));
  } catch (const CommunicationError& e) {
    return grpc::Status(grpc::StatusCode::ABORTED, e.what());
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  }
  reply->set_rpc_seconds(context_.timing_.rpc_seconds);
  reply->set_compute_seconds(seconds_since(start) - context_.timing_.rpc_seconds);
  reply->set_duplicate_pushes(context_.duplicate_pushes_);
  return grpc::Status::OK;
}

std::string run_worker(const ClusterSpec& spec, const FunctionRegistry& registry,
                       Watchdog::Options options) {
  WorkerService service(registry, /*rpc_timeout_s=*/10);
  return serve_task(spec, {&service}, options);
}

}  // namespace dtensor::ps
