// The precision policy through the Keras layers: a layer's own policy against the thread's, and
// a training step under mixed_bfloat16 that keeps the variables and the optimizer state in f32.
#include <catch2/catch.hpp>

#include <cstring>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "ops/precision.h"
#include "train/capture/function.h"
#include "train/keras/layers.h"
#include "train/keras/strategy.h"
#include "train/optim/optimizers.h"

using namespace dtensor;

namespace {

bool same_bits(const DTensor& a, const DTensor& b) {
  const Tensor ga = to_global(a), gb = to_global(b);
  return ga.dtype() == gb.dtype() && ga.num_elements() == gb.num_elements() &&
         std::memcmp(ga.raw_data(), gb.raw_data(), ga.nbytes()) == 0;
}

}  // namespace

TEST_CASE("a Dense layer's policy wins over the thread's", "[precision]") {
  keras::MirroredStrategy strategy;
  auto scope = strategy.scope();
  keras::Dense mixed(6, {}, "mixed"), plain(6, {}, "plain");
  mixed.build(5, 1);
  plain.build(5, 1);  // the same kernel values
  mixed.set_policy(Policy::mixed_bfloat16());
  plain.set_policy(Policy::float32());
  const DTensor x = random_uniform({8, 5}, strategy.batch_layout(2), 3, -1, 1);
  const DTensor y_mixed = mixed.call(x, false), y_plain = plain.call(x, false);
  CHECK(y_mixed.dtype() == DType::kF32);
  CHECK(!same_bits(y_mixed, y_plain));
  {
    PolicyScope thread_mixed(Policy::mixed_bfloat16());
    CHECK(same_bits(plain.call(x, false), y_plain));
  }
  PolicyScope thread_f32(Policy::float32());
  CHECK(same_bits(mixed.call(x, false), y_mixed));
  CHECK(current_policy() == Policy::float32());  // call() restored the thread's policy
}

TEST_CASE("training under mixed_bfloat16 keeps variables and Adam's slots in f32", "[precision]") {
  keras::MirroredStrategy strategy;
  auto scope = strategy.scope();
  keras::Sequential model(12, {keras::Dense(16, dtensor::relu), keras::Dense(4)}, 7);
  const DTensor x = random_uniform({16, 12}, strategy.batch_layout(2), 5, -1, 1);
  const DTensor labels = cast(random_uniform({16}, strategy.batch_layout(1), 6, 0, 4), DType::kI32);
  PolicyScope mixed(Policy::mixed_bfloat16());
  Adam adam(1e-2);
  const std::vector<DVariable> vars = model.variables();
  for (int step = 0; step < 3; ++step) {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    const DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model.call(x, true), labels));
    CHECK(loss.dtype() == DType::kF32);
    const std::vector<DTensor> grads = tape.gradient(loss, vars);
    for (const DTensor& g : grads) CHECK(g.dtype() == DType::kF32);
    adam.apply(vars, grads);
  }
  for (const DVariable& v : vars) CHECK(v.value().dtype() == DType::kF32);
  REQUIRE(adam.slots().size() == 2 * vars.size());
  for (const auto& slot : adam.slots()) CHECK(slot.second.value().dtype() == DType::kF32);
}

TEST_CASE("a captured mixed_bfloat16 step reads bf16 weight copies that Adam refreshes in place",
          "[precision]") {
  keras::MirroredStrategy strategy;
  auto scope = strategy.scope();
  // Two models with the same initial values: one trained eagerly, one by a captured step.
  keras::Sequential eager_model(12, {keras::Dense(16, dtensor::relu), keras::Dense(4)}, 7);
  keras::Sequential captured_model(12, {keras::Dense(16, dtensor::relu), keras::Dense(4)}, 7);
  const DTensor x = random_uniform({16, 12}, strategy.batch_layout(2), 5, -1, 1);
  const DTensor labels = cast(random_uniform({16}, strategy.batch_layout(1), 6, 0, 4), DType::kI32);
  PolicyScope mixed(Policy::mixed_bfloat16());
  Adam eager_adam(1e-2), captured_adam(1e-2);
  auto train_step = [&](keras::Sequential& model, Adam& adam) {
    const std::vector<DVariable> vars = model.variables();
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    const DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model.call(x, true), labels));
    adam.apply(vars, tape.gradient(loss, vars));
    return loss;
  };
  Function step([&](const std::vector<DTensor>&) {
    return std::vector<DTensor>{train_step(captured_model, captured_adam)};
  });
  const std::vector<DVariable> vars = captured_model.variables();
  const DVariable& kernel = vars[0];
  REQUIRE(kernel.shape() == Shape{12, 16});
  const void* copy_buffer = nullptr;
  for (int i = 0; i < 4; ++i) {
    const DTensor eager_loss = train_step(eager_model, eager_adam);
    const DTensor captured_loss = step({})[0];
    INFO("step " << i);
    CHECK(same_bits(captured_loss, eager_loss));
    // The copy holds the current weights rounded to bf16, in the same buffer once replays run.
    const std::optional<DTensor> copy = DVariable::copy_of(kernel.value(), DType::kBF16);
    REQUIRE(copy.has_value());
    CHECK(same_bits(*copy, cast(kernel.value(), DType::kBF16)));
    if (i >= 2) CHECK(copy->shard(0).raw_data() == copy_buffer);
    copy_buffer = copy->shard(0).raw_data();
  }
  CHECK(step.trace_count() == 1);
  for (size_t k = 0; k < vars.size(); ++k) {
    CHECK(same_bits(vars[k].value(), eager_model.variables()[k].value()));
  }
}
