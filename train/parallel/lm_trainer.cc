#include "train/parallel/lm_trainer.h"

#include "ops/autograd.h"
#include "ops/ops.h"

namespace dtensor::parallel {

LmTrainer::LmTrainer(const TransformerConfig& config, const Mesh& mesh, const ParallelPlan& plan,
                     double learning_rate)
    : mesh_(mesh),
      model_(config, mesh),
      adam_(learning_rate),
      captured_(function([this](const std::vector<DTensor>& a) {
        return std::vector<DTensor>{eager_step(a[0], a[1])};
      })) {
  model_.parallelize(plan);
  vars_ = model_.variables();
  adam_.build(vars_);
}

DTensor LmTrainer::eager_step(const DTensor& tokens, const DTensor& labels) {
  GradientTape tape;
  for (const DVariable& v : vars_) tape.watch(v);
  DTensor loss = reduce_mean(lm_loss()(labels, model_.call(tokens, true)));
  adam_.apply(vars_, tape.gradient(loss, vars_));
  return loss;
}

DTensor LmTrainer::step(const DTensor& tokens, const DTensor& labels) {
  return captured_({tokens, labels})[0];
}

int64_t LmTrainer::resident() const {
  std::vector<DVariable> held = vars_;
  for (const auto& [name, slot] : adam_.slots()) held.push_back(slot);
  return resident_bytes(held);
}

}  // namespace dtensor::parallel
