#include "bench/cnn_training.h"

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/optim/weight_decay.h"

namespace dtensor::bench {

CnnTraining::CnnTraining(const Mesh& mesh, int64_t batch, const Policy& policy)
    : policy_(policy),
      model_(mesh, {24, 24, 3}, 10, 1),
      vars_(model_.variables()),
      decayed_(model_.decayed_variables()),
      optimizer_(0.1),
      ema_(0.9999),
      x_(random_uniform({batch, 24, 24, 3}, Layout::batch_sharded(mesh, mesh.dims()[0].name, 4),
                        1)),
      labels_(cast(
          scale(random_uniform({batch}, Layout::batch_sharded(mesh, mesh.dims()[0].name, 1), 2),
                9.99),
          DType::kI32)) {
  optimizer_.build(vars_);
  ema_.track(vars_);
}

void CnnTraining::step() {
  PolicyScope scope(policy_);
  GradientTape tape;
  for (const DVariable& v : vars_) tape.watch(v);
  DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model_(x_), labels_));
  loss = add(loss, weight_decay_loss(decayed_, 0.004));
  optimizer_.apply(vars_, tape.gradient(loss, vars_));
  ema_.apply(vars_);
}

}  // namespace dtensor::bench
