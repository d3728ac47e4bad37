#include "train/ps/parameter_server.h"

#include "dtensor/dtensor.h"
#include "runtime/error.h"
#include "train/ps/tensor_proto.h"

namespace dtensor::ps {
namespace {

// Runs `body`, turning a dtensor::Error into an INVALID_ARGUMENT status with its message.
template <typename Body>
grpc::Status guarded(Body&& body) {
  try {
    body();
    return grpc::Status::OK;
  } catch (const Error& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e.what());
  }
}

// The slots of shard `name` among `slots` ("<name>/<slot>"), by slot name.
std::map<std::string, DVariable> slots_of(
    const std::vector<std::pair<std::string, DVariable>>& slots, const std::string& name) {
  std::map<std::string, DVariable> out;
  const std::string prefix = name + "/";
  for (const auto& [slot_name, var] : slots) {
    if (slot_name.compare(0, prefix.size(), prefix) == 0 &&
        slot_name.find('/', prefix.size()) == std::string::npos) {
      out.emplace(slot_name.substr(prefix.size()), var);
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const rpc::OptimizerConfig& config,
                                          const double* lr_scale) {
  if (!(config.learning_rate() > 0)) {
    throw_error<InvalidArgumentError>("make_optimizer", "learning rate {} must be > 0",
                                      config.learning_rate());
  }
  if (config.cosine_decay_steps() < 0 || config.cosine_decay_alpha() < 0 ||
      config.cosine_decay_alpha() > 1) {
    throw_error<InvalidArgumentError>(
        "make_optimizer",
        "cosine decay over {} steps to alpha {}: want steps >= 0, 0 <= alpha <= 1",
        config.cosine_decay_steps(), config.cosine_decay_alpha());
  }
  const Schedule base = config.cosine_decay_steps() > 0
                            ? cosine_decay(config.learning_rate(), config.cosine_decay_steps(),
                                           config.cosine_decay_alpha())
                            : constant_lr(config.learning_rate());
  Schedule schedule = lr_scale == nullptr ? base : Schedule([base, lr_scale](int64_t step) {
    return base(step) * *lr_scale;
  });
  if (config.type() == "sgd") return std::make_unique<SGD>(std::move(schedule));
  if (config.type() == "adam") return std::make_unique<Adam>(std::move(schedule));
  throw_error<InvalidArgumentError>("make_optimizer", "optimizer '{}' is not one of sgd, adam",
                                    config.type());
}

double staleness_lr_scale(int64_t staleness) {
  return staleness <= 1 ? 1.0 : 1.0 / static_cast<double>(staleness);
}

ParameterServerService::ParameterServerService()
    : mesh_(Mesh::create({{"ps", 1}}, DeviceType::kCPU)) {}

ParameterServerService::~ParameterServerService() = default;

grpc::Status ParameterServerService::Assign(grpc::ServerContext*, const rpc::AssignRequest* request,
                                            rpc::AssignReply*) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(mu_);
    if (!optimizer_) optimizer_ = make_optimizer(request->optimizer(), &lr_scale_);
    std::vector<DVariable> assigned;
    for (const rpc::ShardValue& s : request->shards()) {
      const Tensor value = from_proto(s.value());
      const DTensor d = distribute(value, Layout::replicated(mesh_, value.rank()));
      auto it = shards_.find(s.name());
      if (it == shards_.end()) {
        it = shards_.emplace(s.name(), DVariable(d, s.name())).first;
      } else if (it->second.shape() != value.shape()) {
        throw_error<ShapeError>("ParameterServer::Assign", "shard '{}' has shape {}, not {}",
                                s.name(), shape_to_string(it->second.shape()),
                                shape_to_string(value.shape()));
      } else {
        it->second.assign(d);
      }
      assigned.push_back(it->second);
    }
    optimizer_->build(assigned);
    const auto slots = optimizer_->slots();
    for (const rpc::ShardValue& s : request->shards()) {
      std::map<std::string, DVariable> mine = slots_of(slots, s.name());
      for (const auto& [slot, proto] : s.slots()) {
        auto it = mine.find(slot);
        if (it == mine.end()) {
          throw_error<InvalidArgumentError>(
              "ParameterServer::Assign", "shard '{}' has no optimizer slot '{}'", s.name(), slot);
        }
        const Tensor value = from_proto(proto);
        it->second.assign(distribute(value, Layout::replicated(mesh_, value.rank())));
      }
    }
    optimizer_->set_step(request->step());
  });
}

grpc::Status ParameterServerService::Pull(grpc::ServerContext*, const rpc::PullRequest* request,
                                          rpc::PullReply* reply) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(mu_);
    const auto slots = request->with_slots() && optimizer_
                           ? optimizer_->slots()
                           : std::vector<std::pair<std::string, DVariable>>{};
    for (const auto& [name, var] : shards_) {
      rpc::ShardValue* s = reply->add_shards();
      s->set_name(name);
      to_proto(to_global(var.value()), s->mutable_value());
      for (const auto& [slot, slot_var] : slots_of(slots, name)) {
        to_proto(to_global(slot_var.value()), &(*s->mutable_slots())[slot]);
      }
    }
    reply->set_version(optimizer_ ? optimizer_->step() : 0);
  });
}

grpc::Status ParameterServerService::Push(grpc::ServerContext*, const rpc::PushRequest* request,
                                          rpc::PushReply* reply) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(mu_);
    if (!optimizer_) {
      throw_error<InvalidArgumentError>("ParameterServer::Push", "no variables assigned yet");
    }
    const std::pair<int64_t, int64_t> id{request->step_id(), request->push_index()};
    if (id.first > 0 && applied_.count(id) > 0) {
      ++duplicate_pushes_;
      reply->set_duplicate(true);
      reply->set_version(optimizer_->step());
      return;
    }
    std::vector<DVariable> vars;
    std::vector<DTensor> grads;
    for (const rpc::ShardValue& g : request->gradients()) {
      auto it = shards_.find(g.name());
      if (it == shards_.end()) {
        throw_error<InvalidArgumentError>("ParameterServer::Push", "no shard '{}' here", g.name());
      }
      const Tensor grad = from_proto(g.value());
      if (grad.shape() != it->second.shape()) {
        throw_error<ShapeError>(
            "ParameterServer::Push", "gradient of shape {} for shard '{}' of {}",
            shape_to_string(grad.shape()), g.name(), shape_to_string(it->second.shape()));
      }
      vars.push_back(it->second);
      grads.push_back(distribute(grad, it->second.layout()));
    }
    const int64_t staleness = optimizer_->step() - request->pulled_version();
    staleness_.push_back(staleness);
    lr_scale_ = staleness_lr_scale(staleness);
    optimizer_->apply(vars, grads);
    lr_scale_ = 1.0;
    if (id.first > 0) {
      applied_.insert(id);
      applied_steps_.insert(id.first);
    }
    reply->set_version(optimizer_->step());
  });
}

grpc::Status ParameterServerService::Stats(grpc::ServerContext*, const rpc::StatsRequest*,
                                           rpc::StatsReply* reply) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t s : staleness_) reply->add_staleness(s);
  reply->set_applied_steps(static_cast<int64_t>(applied_steps_.size()));
  reply->set_duplicate_pushes(duplicate_pushes_);
  return grpc::Status::OK;
}

std::string run_parameter_server(const ClusterSpec& spec, Watchdog::Options options) {
  ParameterServerService service;
  return serve_task(spec, {&service}, options);
}

}  // namespace dtensor::ps
