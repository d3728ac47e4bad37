// Optimizer::apply in a replayed step (in place) against the eager apply, over several variables
// at once: the same bits in the variables, their slots and their bf16 copies, for sizes that the
// thread pool splits unevenly, f32 and f64, replicated and sharded layouts, a variable listed
// twice and a variable whose value someone holds. The replay is taken through the StepObserver
// seam as train/capture's recorder takes it (train/optim may not depend on train/capture).
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/step_observer.h"
#include "dtensor/variable.h"
#include "ops/ops.h"
#include "tests/test_tensors.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using dtensor::testing::deep_copy;
using dtensor::testing::same_bits;

namespace {

// Takes an apply as a step recorder does (train/capture): record() runs it with the keeper
// installed, which runs it at once and keeps it; replay() runs it again on other gradients, as a
// replayed step does, which updates in place.
class ApplyKeeper final : public StepObserver {
 public:
  ApplyKeeper() : StepObserver(Role::kTakesWork) {}

  void record(Optimizer& opt, const std::vector<DVariable>& vars,
              const std::vector<DTensor>& grads) {
    install(this);
    opt.apply(vars, grads);
    uninstall(this);
  }

  std::vector<Tensor> shard_call(const char*, const std::vector<Tensor>& shards,
                                 ShardFn run) override {
    Pause pause;
    return run(shards);
  }
  DTensor call(const char*, const Inputs& inputs, ValueFn run) override {
    Pause pause;
    return run(inputs);
  }
  void effect(const char* op, const Inputs& inputs, EffectFn run) override {
    REQUIRE(std::string(op) == "Optimizer::apply");
    Pause pause;
    run(inputs);
    kept_ = std::move(run);
  }

  void replay(const std::vector<DTensor>& grads) const {
    Inputs inputs;
    for (const DTensor& g : grads) inputs.push_back(&g);
    kept_(inputs);
  }

 private:
  EffectFn kept_;
};

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>()> make;
};

std::vector<Case> optimizers() {
  return {{"Adam", [] { return std::make_unique<Adam>(1e-2); }},
          {"AdamW", [] { return std::make_unique<AdamW>(constant_lr(1e-2), 0.1); }},
          {"SGD", [] { return std::make_unique<SGD>(1e-2); }},
          {"SGD momentum", [] { return std::make_unique<SGD>(1e-2, 0.9); }},
          {"SGD nesterov", [] { return std::make_unique<SGD>(1e-2, 0.9, true); }}};
}

// Variables of several sizes: 65,541 elements (split over the pool when replicated, in uneven
// parts), a bias, a tiny matrix and an f64 one.
struct Model {
  std::vector<DVariable> vars;
  explicit Model(const Layout& matrix, const Layout& vector) {
    vars.emplace_back(random_uniform({7, 9363}, matrix, 1, -1.0, 1.0), "w1");
    vars.emplace_back(random_uniform({700}, vector, 2, -1.0, 1.0), "b1");
    vars.emplace_back(random_uniform({5, 12}, matrix, 3, -1.0, 1.0), "w2");
    vars.emplace_back(random_uniform({3, 20000}, matrix, 4, -1.0, 1.0, DType::kF64), "w3");
  }
  Model deep_copy_of() const {
    Model m = *this;
    for (DVariable& v : m.vars) v = DVariable(deep_copy(v.value()), v.name());
    return m;
  }
};

std::vector<DTensor> gradients(const std::vector<DVariable>& vars, uint64_t seed) {
  std::vector<DTensor> out;
  for (const DVariable& v : vars) {
    out.push_back(random_uniform(v.shape(), v.layout(), seed++, -1.0, 1.0, v.dtype()));
  }
  return out;
}

// Makes each f32 variable's bf16 copy and lets go of it: the apply must refresh it.
void make_bf16_copies(const std::vector<DVariable>& vars) {
  for (const DVariable& v : vars) {
    if (v.dtype() == DType::kF32) REQUIRE(DVariable::copy_of(v.value(), DType::kBF16));
  }
}

void check_same(const std::vector<DVariable>& eager, const Optimizer& eager_opt,
                const std::vector<DVariable>& replayed, const Optimizer& replayed_opt) {
  for (size_t i = 0; i < eager.size(); ++i) {
    CAPTURE(eager[i].name());
    const DTensor value = replayed[i].value();
    CHECK(same_bits(eager[i].value(), value));
    if (value.dtype() == DType::kF32) {
      std::optional<DTensor> copy = DVariable::copy_of(value, DType::kBF16);
      REQUIRE(copy);
      CHECK(same_bits(*copy, cast(value, DType::kBF16)));
    }
  }
  const auto eager_slots = eager_opt.slots(), replayed_slots = replayed_opt.slots();
  REQUIRE(eager_slots.size() == replayed_slots.size());
  for (size_t k = 0; k < eager_slots.size(); ++k) {
    CAPTURE(eager_slots[k].first);
    CHECK(same_bits(eager_slots[k].second.value(), replayed_slots[k].second.value()));
  }
}

const void* buffer_of(const DVariable& v) { return v.value().shard(0).raw_data(); }

}  // namespace

TEST_CASE("replayed applies update every variable in place with the eager apply's bits") {
  Mesh m8 = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Mesh m24 = Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU);
  const std::vector<std::pair<Layout, Layout>> layouts = {
      {Layout::replicated(m8, 2), Layout::replicated(m8, 1)},
      {Layout({"unsharded", "model"}, m24), Layout({"model"}, m24)}};
  for (const auto& [matrix, vector] : layouts) {
    for (const Case& c : optimizers()) {
      CAPTURE(matrix.short_string(), c.name);
      Model eager(matrix, vector);
      Model replayed = eager.deep_copy_of();
      std::unique_ptr<Optimizer> eager_opt = c.make(), replayed_opt = c.make();
      ApplyKeeper keeper;
      std::vector<const void*> buffers;
      for (uint64_t step = 0; step < 4; ++step) {
        const std::vector<DTensor> grads = gradients(eager.vars, 100 + 10 * step);
        make_bf16_copies(replayed.vars);
        if (step == 0) {
          keeper.record(*replayed_opt, replayed.vars, grads);
        } else {
          keeper.replay(grads);
        }
        eager_opt->apply(eager.vars, grads);
        check_same(eager.vars, *eager_opt, replayed.vars, *replayed_opt);
        // From the second replay on, the variables keep their buffers.
        std::vector<const void*> now;
        for (const DVariable& v : replayed.vars) now.push_back(buffer_of(v));
        if (step >= 2) CHECK(now == buffers);
        buffers = now;
      }
    }
  }
}

TEST_CASE("a variable listed twice in a replayed apply is updated twice, as eagerly") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Model eager(Layout::replicated(mesh, 2), Layout::replicated(mesh, 1));
  Model replayed = eager.deep_copy_of();
  Adam eager_opt(1e-2), replayed_opt(1e-2);
  auto twice = [](const std::vector<DVariable>& vars) {
    return std::vector<DVariable>{vars[0], vars[1], vars[0], vars[2]};
  };
  ApplyKeeper keeper;
  for (uint64_t step = 0; step < 3; ++step) {
    const std::vector<DTensor> grads = gradients(twice(eager.vars), 300 + 10 * step);
    if (step == 0) {
      keeper.record(replayed_opt, twice(replayed.vars), grads);
    } else {
      keeper.replay(grads);
    }
    eager_opt.apply(twice(eager.vars), grads);
    check_same(eager.vars, eager_opt, replayed.vars, replayed_opt);
  }
}

TEST_CASE("a replayed apply leaves a held value alone and updates the other variables in place") {
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Model eager(Layout::replicated(mesh, 2), Layout::replicated(mesh, 1));
  Model replayed = eager.deep_copy_of();
  Adam eager_opt(1e-2), replayed_opt(1e-2);
  ApplyKeeper keeper;
  keeper.record(replayed_opt, replayed.vars, gradients(replayed.vars, 400));
  eager_opt.apply(eager.vars, gradients(eager.vars, 400));
  for (uint64_t step = 1; step < 4; ++step) {
    CAPTURE(step);
    std::vector<const void*> before;
    for (const DVariable& v : replayed.vars) before.push_back(buffer_of(v));
    const size_t held_index = step % replayed.vars.size();
    const DTensor held = replayed.vars[held_index].value();
    const DTensor held_contents = deep_copy(held);
    const std::vector<DTensor> grads = gradients(eager.vars, 400 + 10 * step);
    keeper.replay(grads);
    eager_opt.apply(eager.vars, grads);
    CHECK(same_bits(held, held_contents));
    check_same(eager.vars, eager_opt, replayed.vars, replayed_opt);
    for (size_t i = 0; i < replayed.vars.size(); ++i) {
      CAPTURE(replayed.vars[i].name());
      CHECK((buffer_of(replayed.vars[i]) == before[i]) == (i != held_index));
    }
  }
}
