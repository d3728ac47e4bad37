// Dense and Sequential: the layers of the Keras guides' models, built on the current strategy.
//
//   keras::MirroredStrategy strategy;
//   auto scope = strategy.scope();
//   keras::Sequential model(784, {keras::Dense(700, relu), keras::Dense(10)}, /*seed=*/22);
//
// Variables are created when a layer is built (Sequential builds its layers in its constructor,
// in order), replicated on the mesh of get_strategy() of the building thread. Kernels are
// Glorot-uniform with counter-based randomness (dtensor/creation.h): the same seed gives the same
// values on any number of replicas. Biases start at zero.
//
// Copies of a built layer share its variables (DVariables are handles). Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ops/precision.h"
#include "train/keras/model.h"

namespace dtensor::keras {

// An elementwise function applied to a layer's output; empty for none (linear). Any unary op
// fits, e.g. dtensor::relu, dtensor::tanh.
using Activation = std::function<DTensor(const DTensor&)>;

// y = activation(x @ kernel + bias), kernel [input_dim, units], bias [units].
class Dense : public Model {
 public:
  // InvalidArgumentError for units < 1.
  explicit Dense(int64_t units, Activation activation = {}, std::string name = "");

  // Creates "<name>/kernel" and "<name>/bias" (InvalidArgumentError if built already, or for
  // input_dim < 1 or an empty name). `seed` seeds the kernel.
  void build(int64_t input_dim, uint64_t seed);
  bool built() const { return kernel_.has_value(); }

  int64_t units() const { return units_; }
  // This layer's precision policy (ops/precision.h): call() runs under it, whatever the caller's
  // policy. Without one, the calling thread's current policy applies. The variables stay f32.
  void set_policy(const Policy& policy) { policy_ = policy; }
  const std::optional<Policy>& policy() const { return policy_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // {kernel, bias} once built, {} before.
  std::vector<DVariable> variables() const override;
  // InvalidArgumentError before build; ops errors for inputs that do not fit the kernel.
  DTensor call(const DTensor& inputs, bool training) override;

 private:
  int64_t units_;
  Activation activation_;
  std::string name_;
  std::optional<DVariable> kernel_, bias_;
  std::optional<Policy> policy_;
};

// Layers applied in order to inputs [batch, input_dim].
class Sequential : public Model {
 public:
  // Builds layer i with the previous layer's units as input dim and seed `seed + i`; a layer
  // without a name is called "dense_<i>".
  Sequential(int64_t input_dim, std::vector<Dense> layers, uint64_t seed = 0);

  const std::vector<Dense>& layers() const { return layers_; }
  std::vector<DVariable> variables() const override;
  DTensor call(const DTensor& inputs, bool training) override;

 private:
  std::vector<Dense> layers_;
};

}  // namespace dtensor::keras
