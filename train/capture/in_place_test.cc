// Optimizer applies in replayed steps update the variables and their slots in place (no fresh
// buffers per step), with eager's bits over several steps; a value a user still holds is never
// written (the apply falls back to fresh buffers for it).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "tests/test_tensors.h"
#include "train/capture/function.h"
#include "train/optim/optimizers.h"

using namespace dtensor;
using dtensor::testing::deep_copy;
using dtensor::testing::same_bits;

namespace {

// A linear least-squares step on one weight.
DTensor linear_step(const DVariable& w, Optimizer& opt, const DTensor& x) {
  GradientTape tape;
  tape.watch(w);
  DTensor loss = reduce_sum(square(matmul(x, w.value())));
  opt.apply({w}, tape.gradient(loss, {w}));
  return loss;
}

struct Setup {
  Mesh mesh;
  Layout weight;
  Layout batch;
};

std::vector<Setup> setups() {
  Mesh m8 = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  Mesh m24 = Mesh::create({{"batch", 2}, {"model", 4}}, DeviceType::kCPU);
  return {{m8, Layout::replicated(m8, 2), Layout::batch_sharded(m8, "batch", 2)},
          {m24, Layout({"unsharded", "model"}, m24), Layout::batch_sharded(m24, "batch", 2)}};
}

std::vector<const void*> buffers(const DVariable& v) {
  std::vector<const void*> out;
  const DTensor value = v.value();
  for (const Tensor& t : value.shards()) out.push_back(t.raw_data());
  return out;
}

}  // namespace

TEST_CASE("replayed Adam and SGD steps update in place with eager's bits over several steps") {
  for (const Setup& s : setups()) {
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(s.mesh.dims_string(), kind);
      auto make = [kind]() -> std::unique_ptr<Optimizer> {
        if (kind == 0) return std::make_unique<Adam>(1e-2);
        if (kind == 1) return std::make_unique<SGD>(1e-2, 0.9);
        return std::make_unique<AdamW>(constant_lr(1e-2), 0.1);
      };
      DTensor w0 = random_uniform({6, 8}, s.weight, 5, -1.0, 1.0);
      DVariable eager_w(deep_copy(w0), "w"), captured_w(deep_copy(w0), "w");
      std::unique_ptr<Optimizer> eager_opt = make(), captured_opt = make();
      Function step = function([&](const std::vector<DTensor>& a) {
        return std::vector<DTensor>{linear_step(captured_w, *captured_opt, a[0])};
      });
      std::vector<const void*> replayed_buffers, replayed_slots;
      for (int i = 0; i < 5; ++i) {
        DTensor x = random_uniform({16, 6}, s.batch, 100 + static_cast<uint64_t>(i), -1.0, 1.0);
        DTensor eager_loss = linear_step(eager_w, *eager_opt, x);
        DTensor captured_loss = step({x})[0];
        CHECK(same_bits(eager_loss, captured_loss));
        CHECK(same_bits(eager_w.value(), captured_w.value()));
        for (size_t k = 0; k < eager_opt->slots().size(); ++k) {
          CHECK(same_bits(eager_opt->slots()[k].second.value(),
                          captured_opt->slots()[k].second.value()));
        }
        // From the second replay on, the variable and its slots keep their buffers.
        std::vector<const void*> now = buffers(captured_w);
        std::vector<const void*> slots;
        for (const auto& [name, slot] : captured_opt->slots()) {
          for (const void* p : buffers(slot)) slots.push_back(p);
        }
        if (i >= 2) {
          CHECK(now == replayed_buffers);
          CHECK(slots == replayed_slots);
        }
        replayed_buffers = now;
        replayed_slots = slots;
      }
      CHECK(step.trace_count() == 1);
    }
  }
}

TEST_CASE("a variable value a user holds keeps its contents when a replay updates the variable") {
  for (const Setup& s : setups()) {
    CAPTURE(s.mesh.dims_string());
    DTensor w0 = random_uniform({6, 8}, s.weight, 6, -1.0, 1.0);
    DVariable eager_w(deep_copy(w0), "w"), captured_w(deep_copy(w0), "w");
    Adam eager_opt(1e-2), captured_opt(1e-2);
    Function step = function([&](const std::vector<DTensor>& a) {
      return std::vector<DTensor>{linear_step(captured_w, captured_opt, a[0])};
    });
    for (int i = 0; i < 4; ++i) {
      DTensor x = random_uniform({16, 6}, s.batch, 200 + static_cast<uint64_t>(i), -1.0, 1.0);
      const DTensor held = captured_w.value();
      const DTensor held_m =
          captured_opt.slots().empty() ? held : captured_opt.slots()[0].second.value();
      const DTensor held_copy = deep_copy(held), held_m_copy = deep_copy(held_m);
      linear_step(eager_w, eager_opt, x);
      step({x});
      CHECK(same_bits(held, held_copy));
      CHECK(same_bits(held_m, held_m_copy));
      CHECK(same_bits(eager_w.value(), captured_w.value()));
      CHECK_FALSE(same_bits(held, captured_w.value()));
    }
  }
}
