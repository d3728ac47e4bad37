// Keras fit under every strategy: the same model, data and optimizer give the same training,
// CentralStorageStrategy and MultiWorkerMirroredStrategy (one worker) that of MirroredStrategy on
// as many replicas to 1e-6, OneDeviceStrategy and the default strategy that of one replica.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "train/keras/strategy.h"
#include "train/keras/test_problem.h"

using namespace dtensor;
using namespace dtensor::keras;
using namespace dtensor::keras::testing;

namespace {

struct Trained {
  History history;
  std::vector<Tensor> weights;
};

Trained fit_with(std::shared_ptr<const Strategy> strategy) {
  Problem p(std::move(strategy));
  FitOptions options = quiet(2);
  options.validation_data = &p.test;
  Trained out;
  out.history = p.trainer.fit(p.train, options);
  out.weights = p.weights();
  return out;
}

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0;
  for (size_t v = 0; v < a.size(); ++v) {
    REQUIRE(a[v].shape() == b[v].shape());
    for (int64_t i = 0; i < a[v].num_elements(); ++i) {
      diff = std::max<double>(diff, std::abs(a[v].data<float>()[i] - b[v].data<float>()[i]));
    }
  }
  return diff;
}

void check_same_training(const Trained& got, const Trained& want) {
  CHECK(max_abs_diff(got.weights, want.weights) < 1e-6);
  REQUIRE(got.history.history.size() == want.history.history.size());
  for (const auto& [name, values] : want.history.history) {
    INFO(name);
    REQUIRE(got.history.history.at(name).size() == values.size());
    for (size_t e = 0; e < values.size(); ++e) {
      CHECK(std::abs(got.history.history.at(name)[e] - values[e]) < 1e-6);
    }
  }
}

}  // namespace

TEST_CASE("CentralStorageStrategy trains as MirroredStrategy does, to 1e-6") {
  const Trained mirrored = fit_with(std::make_shared<MirroredStrategy>(4));
  const Trained central = fit_with(std::make_shared<CentralStorageStrategy>(4));
  check_same_training(central, mirrored);
  // Training moved.
  const std::vector<double>& loss = mirrored.history.history.at("loss");
  CHECK(loss.back() < loss.front());
}

TEST_CASE("CentralStorageStrategy stores each variable once") {
  auto central = std::make_shared<CentralStorageStrategy>(4);
  Problem p(central);
  p.trainer.fit(p.train, quiet(1));
  for (const DVariable& v : p.model.variables()) {
    INFO(v.name());
    const DTensor value = v.value();
    CHECK(value.layout() == central->replicated_layout(value.rank()));
    REQUIRE(value.shards().size() == 4);
    for (const Tensor& shard : value.shards()) {
      CHECK(shard.raw_data() == value.shard(0).raw_data());
    }
  }
}

TEST_CASE("fit takes any strategy") {
  const Trained mirrored4 = fit_with(std::make_shared<MirroredStrategy>(4));
  check_same_training(fit_with(std::make_shared<MultiWorkerMirroredStrategy>(4)), mirrored4);

  const Trained mirrored1 = fit_with(std::make_shared<MirroredStrategy>(1));
  check_same_training(fit_with(std::make_shared<OneDeviceStrategy>()), mirrored1);
  // The default strategy (no scope at all): one replica too.
  std::shared_ptr<const Strategy> default_strategy(&get_strategy(), [](const Strategy*) {});
  REQUIRE(default_strategy->is_default());
  check_same_training(fit_with(default_strategy), mirrored1);
}

TEST_CASE("fit and evaluate refuse data of another strategy than the model's") {
  Problem p(std::make_shared<CentralStorageStrategy>(4));
  MirroredStrategy two(2);
  data::Dataset other = two.experimental_distribute_dataset(p.digits.images, p.digits.labels);
  other.batch(kBatch);
  CHECK_THROWS_MATCHES(
      p.trainer.fit(other, quiet(1)), MeshError,
      Catch::Message("[Trainer::fit] the training data is on mesh replica=2, the model's "
                     "variables on mesh replica=4: build both with one strategy (in its scope, "
                     "and with its experimental_distribute_dataset)"));
  FitOptions options = quiet(1);
  options.validation_data = &other;
  CHECK_THROWS_MATCHES(
      p.trainer.fit(p.train, options), MeshError,
      Catch::Message("[Trainer::fit] the validation data is on mesh replica=2, the model's "
                     "variables on mesh replica=4: build both with one strategy (in its scope, "
                     "and with its experimental_distribute_dataset)"));
  CHECK_THROWS_MATCHES(
      p.trainer.evaluate(other), MeshError,
      Catch::Message("[Trainer::evaluate] the data is on mesh replica=2, the model's variables on "
                     "mesh replica=4: build both with one strategy (in its scope, and with its "
                     "experimental_distribute_dataset)"));
}
