// LmTrainer: a TransformerLM placed by a plan on a mesh, Adam over its variables, and its training
// step (forward, lm_loss, backward, Adam), eager or captured: what the tests and benchmarks of
// train/parallel train.
//
//   LmTrainer t(config, mesh, {.data = "data", .fsdp = true}, 1e-3);
//   DTensor loss = t.step(tokens, labels);   // traced on the first call, replayed after
//
// Owns the model, the optimizer and the captured step; pinned (the step refers to it). Not
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "train/capture/function.h"
#include "train/optim/optimizers.h"
#include "train/parallel/transformer.h"

namespace dtensor::parallel {

class LmTrainer {
 public:
  LmTrainer(const TransformerConfig& config, const Mesh& mesh, const ParallelPlan& plan,
            double learning_rate);
  LmTrainer(const LmTrainer&) = delete;
  LmTrainer& operator=(const LmTrainer&) = delete;

  // One step on tokens [batch, seq] and next-token labels: eager (the model's meter and timeline
  // see every gather as it happens) or through the captured Function. Returns the loss.
  DTensor eager_step(const DTensor& tokens, const DTensor& labels);
  DTensor step(const DTensor& tokens, const DTensor& labels);
  // Bytes of the parameters and Adam's slots on local device 0.
  int64_t resident() const;

  const Mesh& mesh() const { return mesh_; }
  TransformerLM& model() { return model_; }
  Function& captured() { return captured_; }

 private:
  Mesh mesh_;
  TransformerLM model_;
  Adam adam_;
  std::vector<DVariable> vars_;
  Function captured_;
};

}  // namespace dtensor::parallel
