// Test support: a small classification problem (synthetic digits, a 784-16-10 MLP, Adam, the
// accuracy metric) on a MirroredStrategy, or any strategy, built identically every time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ops/ops.h"
#include "train/data/idx.h"
#include "train/keras/layers.h"
#include "train/keras/strategy.h"
#include "train/keras/trainer.h"

namespace dtensor::keras::testing {

constexpr int64_t kExamples = 96;
constexpr int64_t kBatch = 16;  // 6 batches per epoch

struct Problem {
  explicit Problem(int64_t replicas = 4, int64_t examples = kExamples)
      : Problem(std::make_shared<MirroredStrategy>(replicas), examples) {}
  explicit Problem(std::shared_ptr<const Strategy> s, int64_t examples = kExamples)
      : strategy_storage(std::move(s)),
        strategy(*strategy_storage),
        digits(data::synthetic_digits(examples, 3)),
        test_digits(data::synthetic_digits(48, 4)),
        train(strategy.distribute_dataset(digits.images, digits.labels)),
        test(strategy.distribute_dataset(test_digits.images, test_digits.labels)),
        model(make_model(strategy)),
        optimizer(1e-2),
        trainer(model, optimizer, sparse_categorical_crossentropy(),
                metrics_list<SparseCategoricalAccuracy>()) {
    train.shuffle(7).batch(kBatch).repeat();
    test.batch(kBatch);
  }
  static Sequential make_model(const Strategy& s) {
    auto scope = s.scope();
    return Sequential(784, {Dense(16, relu), Dense(10)}, 21);
  }
  std::vector<Tensor> weights() const {
    std::vector<Tensor> out;
    for (const DVariable& v : model.variables()) out.push_back(to_global(v.value()));
    return out;
  }

  std::shared_ptr<const Strategy> strategy_storage;
  const Strategy& strategy;
  data::MnistSplit digits, test_digits;
  data::Dataset train, test;
  Sequential model;
  Adam optimizer;
  Trainer trainer;
};

inline FitOptions quiet(int64_t epochs) {
  FitOptions o;
  o.epochs = epochs;
  o.verbose = Verbosity::kSilent;
  return o;
}

inline bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!bitwise_equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace dtensor::keras::testing
