#include "train/keras/layers.h"

#include <cmath>

#include "dtensor/creation.h"
#include "ops/ops.h"
#include "runtime/error.h"
#include "train/keras/layout_map.h"
#include "train/keras/strategy.h"

namespace dtensor::keras {

namespace {

// A new variable `path`, made by `make` in the layout the current LayoutMap gives it (replicated
// without one): counter-based values are the same in every layout.
DVariable make_variable(const std::string& path, const std::function<DTensor(const Layout&)>& make,
                        const Shape& shape) {
  return DVariable(make(variable_layout(path, shape, get_strategy().mesh())), path);
}

void check_buildable(const char* fn, const Layer& layer, int64_t dim) {
  if (layer.built()) {
    throw_error<InvalidArgumentError>(fn, "layer '{}' is built already", layer.name());
  }
  if (dim < 1) {
    throw_error<InvalidArgumentError>(fn, "layer '{}': input dim must be >= 1, got {}",
                                      layer.name(), dim);
  }
  if (layer.name().empty()) throw_error<InvalidArgumentError>(fn, "the layer has no name");
}

void check_built(const char* fn, const Layer& layer) {
  if (!layer.built()) {
    throw_error<InvalidArgumentError>(fn, "layer '{}' is not built", layer.name());
  }
}

bool is_sequence(const ParallelStyle& style) {
  return style.kind() == ParallelStyle::Kind::kSequence;
}

}  // namespace

// ---- Dense -----------------------------------------------------------------------------------

Dense::Dense(int64_t units, Activation activation, std::string name)
    : Layer(std::move(name)), units_(units), activation_(std::move(activation)) {
  if (units < 1) throw_error<InvalidArgumentError>("Dense", "units must be >= 1, got {}", units);
}

void Dense::build(int64_t input_dim, uint64_t seed) {
  check_buildable("Dense::build", *this, input_dim);
  const double limit = std::sqrt(6.0 / static_cast<double>(input_dim + units_));
  const Shape kernel_shape = {input_dim, units_};
  kernel_ = make_variable(
      name() + "/kernel",
      [&](const Layout& l) { return random_uniform(kernel_shape, l, seed, -limit, limit); },
      kernel_shape);
  bias_ = make_variable(name() + "/bias", [&](const Layout& l) { return zeros({units_}, l); },
                        {units_});
}

std::vector<DVariable> Dense::variables() const {
  if (!built()) return {};
  return {*kernel_, *bias_};
}

std::string Dense::unfit(const ParallelStyle& style) const {
  if (is_sequence(style)) return "Dense takes ColwiseParallel or RowwiseParallel";
  if (style.output().kind() == Placement::Kind::kPartial && activation_) {
    return "its activation needs the whole sum, not Partial()";
  }
  return "";
}

std::vector<Layout> Dense::variable_layouts(const ParallelStyle& style) const {
  const bool colwise = style.kind() == ParallelStyle::Kind::kColwise;
  const std::string fn = "Dense::place";
  return {with_placement(kernel_->layout(), style.mesh_dim(), Shard(colwise ? 1 : 0), fn, name()),
          with_placement(bias_->layout(), style.mesh_dim(), colwise ? Shard(0) : Replicate(), fn,
                         name())};
}

void Dense::set_variables(const std::vector<DVariable>& vars) {
  kernel_ = vars[0];
  bias_ = vars[1];
}

DTensor Dense::activate(const DTensor& y) const { return activation_ ? activation_(y) : y; }

DTensor Dense::call(const DTensor& inputs, bool) {
  const char* fn = "Dense::call";
  check_built(fn, *this);
  std::optional<PolicyScope> scope;
  if (policy_) scope.emplace(*policy_);
  const DTensor x = input(inputs, fn);
  if (style() && style()->kind() == ParallelStyle::Kind::kRowwise) {
    // The partial sum goes to the output layout first (all-reduce, or reduce-scatter along the
    // sequence), so the bias is added once, to the whole sum, on the shards that layout keeps.
    const DTensor y = output(matmul(x, kernel_->value()), fn);
    return activate(add(y, bias_->value()));
  }
  // dtensor::relu itself (the usual `Dense(n, relu)`) fuses into the dense op's gemm; any other
  // activation runs after it. dense falls back to the unfused composition where the layouts
  // make the product partial, so every layout gets relu(x @ w + b).
  using Fn = DTensor (*)(const DTensor&);
  const Fn* relu_fn = activation_.target<Fn>();
  if (relu_fn != nullptr && *relu_fn == static_cast<Fn>(&dtensor::relu)) {
    return output(dense(x, kernel_->value(), bias_->value(), DenseActivation::kRelu), fn);
  }
  return output(activate(dense(x, kernel_->value(), bias_->value())), fn);
}

// ---- Embedding -------------------------------------------------------------------------------

Embedding::Embedding(int64_t input_dim, int64_t output_dim, std::string name)
    : Layer(std::move(name)), input_dim_(input_dim), output_dim_(output_dim) {
  if (input_dim < 1 || output_dim < 1) {
    throw_error<InvalidArgumentError>("Embedding", "sizes must be >= 1, got [{}, {}]", input_dim,
                                      output_dim);
  }
}

void Embedding::build(uint64_t seed) {
  check_buildable("Embedding::build", *this, input_dim_);
  const Shape shape = {input_dim_, output_dim_};
  table_ = make_variable(
      name() + "/embeddings",
      [&](const Layout& l) { return random_uniform(shape, l, seed, -0.05, 0.05); }, shape);
}

std::vector<DVariable> Embedding::variables() const {
  if (!built()) return {};
  return {*table_};
}

std::string Embedding::unfit(const ParallelStyle& style) const {
  return is_sequence(style) ? "Embedding takes ColwiseParallel or RowwiseParallel" : "";
}

std::vector<Layout> Embedding::variable_layouts(const ParallelStyle& style) const {
  const bool colwise = style.kind() == ParallelStyle::Kind::kColwise;
  return {with_placement(table_->layout(), style.mesh_dim(), Shard(colwise ? 1 : 0),
                         "Embedding::place", name())};
}

DTensor Embedding::call(const DTensor& ids, bool) {
  const char* fn = "Embedding::call";
  check_built(fn, *this);
  return output(embedding(table_->value(), input(ids, fn)), fn);
}

// ---- LayerNormalization ----------------------------------------------------------------------

LayerNormalization::LayerNormalization(double epsilon, std::string name)
    : Layer(std::move(name)), epsilon_(epsilon) {}

void LayerNormalization::build(int64_t dim) {
  check_buildable("LayerNormalization::build", *this, dim);
  gamma_ = make_variable(name() + "/gamma", [&](const Layout& l) { return ones({dim}, l); }, {dim});
  beta_ = make_variable(name() + "/beta", [&](const Layout& l) { return zeros({dim}, l); }, {dim});
}

std::vector<DVariable> LayerNormalization::variables() const {
  if (!built()) return {};
  return {*gamma_, *beta_};
}

std::string LayerNormalization::unfit(const ParallelStyle& style) const {
  return is_sequence(style) ? "" : "LayerNormalization takes SequenceParallel";
}

void LayerNormalization::set_variables(const std::vector<DVariable>& vars) {
  gamma_ = vars[0];
  beta_ = vars[1];
}

DTensor LayerNormalization::call(const DTensor& inputs, bool) {
  const char* fn = "LayerNormalization::call";
  check_built(fn, *this);
  return output(layer_norm(input(inputs, fn), gamma_->value(), beta_->value(), epsilon_), fn);
}

// ---- Dropout ---------------------------------------------------------------------------------

Dropout::Dropout(double rate, uint64_t seed, std::string name)
    : Layer(std::move(name)), rate_(rate), seed_(seed) {
  if (!(rate >= 0 && rate < 1)) {
    throw_error<InvalidArgumentError>("Dropout", "rate must be in [0, 1), got {}", rate);
  }
}

std::string Dropout::unfit(const ParallelStyle& style) const {
  return is_sequence(style) ? "" : "Dropout takes SequenceParallel";
}

DTensor Dropout::call(const DTensor& inputs, bool training) {
  const char* fn = "Dropout::call";
  const DTensor x = input(inputs, fn);
  if (!training || rate_ == 0) return output(x, fn);
  if (!seeds_) seeds_.emplace(x.mesh(), static_cast<int64_t>(seed_ % (uint64_t{1} << 52)), name());
  if (!(seeds_->state().layout().mesh() == x.mesh())) {
    throw_error<MeshError>(fn, "layer '{}' drew masks on mesh {}, not on {}", name(),
                           seeds_->state().layout().mesh().dims_string(), x.mesh().dims_string());
  }
  return output(dropout(x, rate_, seeds_->next()), fn);
}

// ---- Sequential ------------------------------------------------------------------------------

Sequential::Sequential(int64_t input_dim, std::vector<Dense> layers, uint64_t seed)
    : Layer("sequential"), layers_(std::move(layers)) {
  int64_t dim = input_dim;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layers_[i].name().empty()) layers_[i].set_name("dense_" + std::to_string(i));
    if (!layers_[i].built()) layers_[i].build(dim, seed + i);
    dim = layers_[i].units();
  }
}

std::vector<Layer*> Sequential::sublayers() {
  std::vector<Layer*> out;
  for (Dense& layer : layers_) out.push_back(&layer);
  return out;
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
