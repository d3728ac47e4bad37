// Model: what keras::Trainer trains. A model maps a batch of inputs to predictions and owns
// trainable variables; Dense and Sequential (layers.h) are ready-made ones, and any class can
// implement the two methods (wrapping examples::Mlp, say).
//
// A model's variables must have distinct, stable names: checkpoints find them by name.
//
// Thread-safety: as the implementation says; the trainer calls a model from one thread.
#pragma once

#include <vector>

#include "dtensor/variable.h"

namespace dtensor::keras {

class Model {
 public:
  virtual ~Model() = default;

  // The trainable variables, in a fixed order (the optimizer's and the checkpoint's).
  virtual std::vector<DVariable> variables() const = 0;
  // Predictions (e.g. logits [batch, classes]) for `inputs` ([batch, ...], batch-sharded).
  // `training` is true inside fit's train steps, for layers that behave differently then.
  virtual DTensor call(const DTensor& inputs, bool training) = 0;
};

}  // namespace dtensor::keras
