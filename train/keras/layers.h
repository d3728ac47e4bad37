// Dense and Sequential: the layers of the Keras guides' models, built on the current strategy.
//
//   keras::MirroredStrategy strategy;
//   auto scope = strategy.scope();
//   keras::Sequential model(784, {keras::Dense(700, relu), keras::Dense(10)}, /*seed=*/22);
//
// Variables are created when a layer is built (Sequential builds its layers in its constructor,
// in order) on the mesh of get_strategy() of the building thread: replicated, or as the current
// LayoutMap says (train/keras/layout_map.h). Kernels are Glorot-uniform with counter-based
// randomness (dtensor/creation.h): the same seed gives the same values on any number of replicas
// and in any layout. Biases and betas start at zero, gammas at one.
//
// Parallel styles (train/keras/parallel_style.h, applied by parallelize.h): Dense and Embedding
// take ColwiseParallel and RowwiseParallel, LayerNormalization and Dropout SequenceParallel.
//
// Copies of a built layer share its variables (DVariables are handles). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ops/precision.h"
#include "ops/seed_generator.h"
#include "train/keras/layer.h"

namespace dtensor::keras {

// An elementwise function applied to a layer's output; empty for none (linear). Any unary op
// fits, e.g. dtensor::relu, dtensor::tanh.
using Activation = std::function<DTensor(const DTensor&)>;

// y = activation(x @ kernel + bias), kernel [input_dim, units], bias [units], x [..., input_dim].
// Under RowwiseParallel the product's partial sum is brought to the output layout (all-reduced or
// reduce-scattered) before the bias and the activation.
class Dense : public Layer {
 public:
  // InvalidArgumentError for units < 1.
  explicit Dense(int64_t units, Activation activation = {}, std::string name = "");

  // Creates "<name>/kernel" and "<name>/bias" (InvalidArgumentError if built already, or for
  // input_dim < 1 or an empty name). `seed` seeds the kernel.
  void build(int64_t input_dim, uint64_t seed);
  bool built() const override { return kernel_.has_value(); }
  const char* kind() const override { return "Dense"; }

  int64_t units() const { return units_; }
  // This layer's precision policy (ops/precision.h): call() runs under it, whatever the caller's
  // policy. Without one, the calling thread's current policy applies. The variables stay f32.
  void set_policy(const Policy& policy) { policy_ = policy; }
  const std::optional<Policy>& policy() const { return policy_; }

  // {kernel, bias} once built, {} before.
  std::vector<DVariable> variables() const override;
  // InvalidArgumentError before build; ops errors for inputs that do not fit the kernel.
  DTensor call(const DTensor& inputs, bool training) override;

 protected:
  std::string unfit(const ParallelStyle& style) const override;
  std::vector<Layout> variable_layouts(const ParallelStyle& style) const override;
  void set_variables(const std::vector<DVariable>& vars) override;

 private:
  DTensor activate(const DTensor& y) const;

  int64_t units_;
  Activation activation_;
  std::optional<DVariable> kernel_, bias_;
  std::optional<Policy> policy_;
};

// Keras's Embedding: rows of embeddings [input_dim, output_dim] at integer ids [...], giving
// [..., output_dim]. Under RowwiseParallel the table is split over the vocabulary (each device
// reads its rows: a partial sum, brought to the output layout); under ColwiseParallel over the
// features (output Shard(-1)). Either way the ids are read whole.
class Embedding : public Layer {
 public:
  // InvalidArgumentError for sizes < 1.
  Embedding(int64_t input_dim, int64_t output_dim, std::string name = "");

  // Creates "<name>/embeddings", uniform in [-0.05, 0.05) (Keras's default), seeded `seed`.
  void build(uint64_t seed);
  bool built() const override { return table_.has_value(); }
  const char* kind() const override { return "Embedding"; }
  std::vector<DVariable> variables() const override;
  // InvalidArgumentError before build; the embedding op's errors for ids that do not fit.
  DTensor call(const DTensor& ids, bool training) override;

 protected:
  std::string unfit(const ParallelStyle& style) const override;
  std::vector<Layout> variable_layouts(const ParallelStyle& style) const override;
  Placement compute_input(const ParallelStyle&) const override { return Replicate(); }
  void set_variables(const std::vector<DVariable>& vars) override { table_ = vars[0]; }

 private:
  int64_t input_dim_, output_dim_;
  std::optional<DVariable> table_;
};

// Keras's LayerNormalization over the last dim: gamma [dim], beta [dim].
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(double epsilon = 1e-3, std::string name = "");

  // Creates "<name>/gamma" and "<name>/beta" (errors as Dense::build).
  void build(int64_t dim);
  bool built() const override { return gamma_.has_value(); }
  const char* kind() const override { return "LayerNormalization"; }
  std::vector<DVariable> variables() const override;
  // InvalidArgumentError before build.
  DTensor call(const DTensor& inputs, bool training) override;

 protected:
  std::string unfit(const ParallelStyle& style) const override;
  void set_variables(const std::vector<DVariable>& vars) override;

 private:
  double epsilon_;
  std::optional<DVariable> gamma_, beta_;
};

// Keras's Dropout: in training, each element zeroed with probability `rate` (kept ones scaled by
// 1 / (1 - rate)), with masks from a SeedGenerator seeded `seed` on the mesh of its first input:
// the same masks on every mesh and layout. No variables.
class Dropout : public Layer {
 public:
  // InvalidArgumentError for a rate outside [0, 1).
  Dropout(double rate, uint64_t seed, std::string name = "");

  const char* kind() const override { return "Dropout"; }
  std::vector<DVariable> variables() const override { return {}; }
  // MeshError for an input on another mesh than the first one's.
  DTensor call(const DTensor& inputs, bool training) override;

 protected:
  std::string unfit(const ParallelStyle& style) const override;

 private:
  double rate_;
  uint64_t seed_;
  std::optional<SeedGenerator> seeds_;
};

// Dense layers applied in order to inputs [..., input_dim]; a root for parallelize, whose paths
// are the layers' names.
class Sequential : public Layer {
 public:
  // Builds layer i with the previous layer's units as input dim and seed `seed + i`; a layer
  // without a name is called "dense_<i>".
  Sequential(int64_t input_dim, std::vector<Dense> layers, uint64_t seed = 0);

  const char* kind() const override { return "Sequential"; }
  const std::vector<Dense>& layers() const { return layers_; }
  std::vector<Layer*> sublayers() override;
  std::vector<DVariable> variables() const override;
  DTensor call(const DTensor& inputs, bool training) override;

 private:
  std::vector<Dense> layers_;
};

}  // namespace dtensor::keras
