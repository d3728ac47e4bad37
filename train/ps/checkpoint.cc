#include "train/ps/checkpoint.h"

#include <memory>
#include <vector>

#include "dtensor/creation.h"
#include "train/checkpoint/checkpoint.h"
#include "train/ps/parameter_server.h"

namespace dtensor::ps {
namespace {

// The strategy's variables, whole, on its one-device mesh, and its optimizer, tracked by a
// Checkpoint under the names the header promises.
struct Tracked {
  std::vector<DVariable> vars;
  std::unique_ptr<Optimizer> optimizer;
  Checkpoint checkpoint;
};

DTensor on_mesh(const ParameterServerStrategy& strategy, const Tensor& value) {
  return distribute(value, strategy.replicated_layout(value.rank()));
}

std::unique_ptr<Tracked> track(const ParameterServerStrategy& strategy,
                               const std::map<std::string, Tensor>* values) {
  auto t = std::make_unique<Tracked>();
  for (const ShardedVariable& v : strategy.sharded_variables()) {
    const DTensor initial =
        values != nullptr
            ? on_mesh(strategy, values->at(v.name))
            : zeros(v.shape, strategy.replicated_layout(static_cast<int64_t>(v.shape.size())));
    t->vars.emplace_back(initial, v.name);
    t->checkpoint.add_variable(v.name, t->vars.back());
  }
  rpc::OptimizerConfig config;
  config.set_type(strategy.options().optimizer);
  config.set_learning_rate(strategy.options().learning_rate);
  config.set_cosine_decay_steps(strategy.options().lr_decay_steps);
  config.set_cosine_decay_alpha(strategy.options().lr_decay_alpha);
  t->optimizer = make_optimizer(config);
  t->checkpoint.add_optimizer("optimizer", *t->optimizer, t->vars);
  return t;
}

}  // namespace

std::string save_checkpoint(const ParameterServerStrategy& strategy, const std::string& directory,
                            int64_t step, int64_t max_to_keep) {
  int64_t optimizer_step = 0;
  const std::map<std::string, Tensor> values = strategy.read_variables(true, &optimizer_step);
  std::unique_ptr<Tracked> t = track(strategy, &values);
  t->optimizer->build(t->vars);
  for (auto& [name, slot] : t->optimizer->slots()) {
    auto it = values.find(name);
    if (it != values.end()) slot.assign(on_mesh(strategy, it->second));
  }
  t->optimizer->set_step(optimizer_step);
  CheckpointManager manager(t->checkpoint, directory, max_to_keep);
  return manager.save(step);
}

std::optional<int64_t> restore_latest(const ParameterServerStrategy& strategy,
                                      const std::string& directory) {
  std::unique_ptr<Tracked> t = track(strategy, nullptr);
  CheckpointManager manager(t->checkpoint, directory, 1 << 30);
  std::optional<int64_t> step = manager.restore_latest();
  if (!step) return std::nullopt;
  std::map<std::string, Tensor> values;
  for (const DVariable& v : t->vars) values.emplace(v.name(), to_global(v.value()));
  for (const auto& [name, slot] : t->optimizer->slots()) {
    values.emplace(name, to_global(slot.value()));
  }
  strategy.assign_variables(values, t->optimizer->step());
  return step;
}

}  // namespace dtensor::ps
