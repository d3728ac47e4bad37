#include "train/keras/layers.h"

#include <cmath>

#include "dtensor/creation.h"
#include "ops/ops.h"
#include "runtime/error.h"
#include "train/keras/strategy.h"

namespace dtensor::keras {

Dense::Dense(int64_t units, Activation activation, std::string name)
    : units_(units), activation_(std::move(activation)), name_(std::move(name)) {
  if (units < 1) throw_error<InvalidArgumentError>("Dense", "units must be >= 1, got {}", units);
}

void Dense::build(int64_t input_dim, uint64_t seed) {
  const char* fn = "Dense::build";
  if (built()) throw_error<InvalidArgumentError>(fn, "layer '{}' is built already", name_);
  if (input_dim < 1) {
    throw_error<InvalidArgumentError>(fn, "layer '{}': input dim must be >= 1, got {}", name_,
                                      input_dim);
  }
  if (name_.empty()) throw_error<InvalidArgumentError>(fn, "the layer has no name");
  const Strategy& strategy = get_strategy();
  const double limit = std::sqrt(6.0 / static_cast<double>(input_dim + units_));
  kernel_.emplace(
      random_uniform({input_dim, units_}, strategy.replicated_layout(2), seed, -limit, limit),
      name_ + "/kernel");
  bias_.emplace(zeros({units_}, strategy.replicated_layout(1)), name_ + "/bias");
}

std::vector<DVariable> Dense::variables() const {
  if (!built()) return {};
  return {*kernel_, *bias_};
}

DTensor Dense::call(const DTensor& inputs, bool) {
  if (!built()) {
    throw_error<InvalidArgumentError>("Dense::call", "layer '{}' is not built", name_);
  }
  std::optional<PolicyScope> scope;
  if (policy_) scope.emplace(*policy_);
  // dtensor::relu itself (the usual `Dense(n, relu)`) fuses into the dense op's gemm; any other
  // activation runs after it. dense falls back to the unfused composition where the layouts
  // make the product partial, so every layout gets relu(x @ w + b).
  using Fn = DTensor (*)(const DTensor&);
  const Fn* fn = activation_.target<Fn>();
  if (fn != nullptr && *fn == static_cast<Fn>(&dtensor::relu)) {
    return dense(inputs, kernel_->value(), bias_->value(), DenseActivation::kRelu);
  }
  DTensor y = dense(inputs, kernel_->value(), bias_->value());
  return activation_ ? activation_(y) : y;
}

Sequential::Sequential(int64_t input_dim, std::vector<Dense> layers, uint64_t seed)
    : layers_(std::move(layers)) {
  int64_t dim = input_dim;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].name().empty()) layers_[i].set_name("dense_" + std::to_string(i));
    if (!layers_[i].built()) layers_[i].build(dim, seed + i);
    dim = layers_[i].units();
  }
}

std::vector<DVariable> Sequential::variables() const {
  std::vector<DVariable> out;
  for (const Dense& layer : layers_) {
    for (const DVariable& v : layer.variables()) out.push_back(v);
  }
  return out;
}

DTensor Sequential::call(const DTensor& inputs, bool training) {
  DTensor h = inputs;
  for (Dense& layer : layers_) h = layer.call(h, training);
  return h;
}

}  // namespace dtensor::keras
