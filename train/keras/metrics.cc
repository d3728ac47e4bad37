#include "train/keras/metrics.h"

#include "dtensor/creation.h"
#include "dtensor/host_copy.h"
#include "ops/ops.h"
#include "runtime/error.h"

namespace dtensor::keras {
namespace {

// The sum of all elements, accumulated in f64 (on the devices; one scalar read back).
double sum_of(const DTensor& values) {
  DTensor v = values.dtype() == DType::kF64 ? values : cast(values, DType::kF64);
  return host_readable(to_global(reduce_sum(v))).data<double>()[0];
}

}  // namespace

Loss sparse_categorical_crossentropy(bool from_logits) {
  if (from_logits) {
    return [](const DTensor& labels, const DTensor& logits) {
      return sparse_softmax_cross_entropy(logits, labels);
    };
  }
  return [](const DTensor& labels, const DTensor& probabilities) {
    if (probabilities.rank() < 1) {
      throw_error<ShapeError>("sparse_categorical_crossentropy",
                              "probabilities {} have no class dim", probabilities.short_string());
    }
    const Layout scalar = Layout::replicated(probabilities.mesh(), 0);
    const double eps = 1e-7;
    DTensor p = minimum(maximum(probabilities, fill({}, scalar, eps, probabilities.dtype())),
                        fill({}, scalar, 1 - eps, probabilities.dtype()));
    DTensor picked =
        mul(one_hot(labels, probabilities.shape().back(), probabilities.dtype()), log(p));
    return neg(reduce_sum(picked, {-1}));
  };
}

void Mean::update_state(const DTensor& values) {
  total_ += sum_of(values);
  count_ += static_cast<double>(values.num_elements());
}

void Mean::update_state(double value, double weight) {
  if (!(weight >= 0)) {
    throw_error<InvalidArgumentError>("Mean::update_state", "metric '{}': weight {} is negative",
                                      name(), weight);
  }
  total_ += value * weight;
  count_ += weight;
}

void Mean::update(const DTensor&, const DTensor& predictions) { update_state(predictions); }

void Mean::track_state(const std::string& prefix, StateRefs& refs) {
  refs.doubles.emplace_back(prefix + "total", &total_);
  refs.doubles.emplace_back(prefix + "count", &count_);
}

SparseCategoricalAccuracy::SparseCategoricalAccuracy(std::string name)
    : MeanMetricWrapper(std::move(name), [](const DTensor& labels, const DTensor& predictions) {
        DTensor predicted = cast(argmax(predictions, -1), labels.dtype());
        return cast(equal(predicted, labels), DType::kF32);
      }) {}

}  // namespace dtensor::keras
