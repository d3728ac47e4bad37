#include "train/optim/optimizers.h"

#include <cmath>

#include <optional>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "kernels/optimizer_update.h"
#include "train/optim/in_place_update.h"

namespace dtensor {

Schedule constant_lr(double lr) {
  return [lr](int64_t) { return lr; };
}

Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase) {
  if (decay_steps < 1) {
    throw_error<InvalidArgumentError>("exponential_decay", "decay_steps must be >= 1, got {}",
                                      decay_steps);
  }
  return [=](int64_t step) {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps);
    return lr * std::pow(rate, staircase ? std::floor(p) : p);
  };
}

Schedule cosine_decay(double lr, int64_t decay_steps, double alpha) {
  if (decay_steps < 1) {
    throw_error<InvalidArgumentError>("cosine_decay", "decay_steps must be >= 1, got {}",
                                      decay_steps);
  }
  return [=](int64_t step) {
    double p = static_cast<double>(std::min(step, decay_steps)) / static_cast<double>(decay_steps);
    return lr * ((1 - alpha) * 0.5 * (1 + std::cos(M_PI * p)) + alpha);
  };
}

std::vector<std::pair<std::string, DVariable>> Optimizer::slots() const {
  std::vector<std::pair<std::string, DVariable>> out;
  for (const auto& [id, vars] : slots_) {
    for (const DVariable& v : vars) out.emplace_back(v.name(), v);
  }
  return out;
}

namespace {

void check_updatable(const DVariable& var, const std::string& function) {
  if (!is_floating(var.dtype()) || var.dtype() == DType::kBF16) {
    throw_error<DTypeError>(function, "variable '{}' is {}; f32 and f64 are supported", var.name(),
                            dtype_name(var.dtype()));
  }
}

}  // namespace

std::vector<DVariable>& Optimizer::slots_of(const DVariable& var, const std::string& function) {
  check_updatable(var, function);
  auto& slot_vars = slots_[var.id()];
  if (slot_vars.empty()) {
    for (const std::string& s : slot_names()) {
      slot_vars.emplace_back(zeros(var.shape(), var.layout(), var.dtype()), var.name() + "/" + s);
    }
  }
  return slot_vars;
}

void Optimizer::build(const std::vector<DVariable>& vars) {
  const std::string fn = name_ + "::build";
  for (const DVariable& var : vars) slots_of(var, fn);
}

void Optimizer::apply(const std::vector<DVariable>& vars, const std::vector<DTensor>& grads) {
  // Traced: one step of the program that applies again on replay, with the step count and
  // learning rate of that time (this optimizer must outlive the captured function). A replay
  // updates in place the buffers no one else holds.
  if (StepObserver* hook = StepObserver::active()) {
    StepObserver::Inputs inputs;
    for (const DTensor& g : grads) inputs.push_back(&g);
    hook->effect("Optimizer::apply", inputs, [this, vars](const StepObserver::Inputs& in) {
      std::vector<DTensor> replayed;
      replayed.reserve(in.size());
      for (const DTensor* g : in) replayed.push_back(*g);
      apply_now(vars, replayed, /*in_place=*/true);
    });
    return;
  }
  apply_now(vars, grads, /*in_place=*/false);
}

void Optimizer::apply_now(const std::vector<DVariable>& vars, const std::vector<DTensor>& grads,
                          bool in_place) {
  const std::string fn = name_ + "::apply";
  if (vars.size() != grads.size()) {
    throw_error<InvalidArgumentError>(fn, "got {} gradients for {} variables", grads.size(),
                                      vars.size());
  }
  // Every pair is checked before anything changes: a rejected apply leaves variables, slots and
  // the step as they were.
  for (size_t i = 0; i < vars.size(); ++i) {
    const DVariable& var = vars[i];
    if (grads[i].shape() != var.shape() || grads[i].dtype() != var.dtype() ||
        grads[i].mesh() != var.layout().mesh()) {
      throw_error<ShapeError>(fn, "gradient {} does not match variable '{}' {}{} {}",
                              grads[i].short_string(), var.name(), dtype_name(var.dtype()),
                              shape_to_string(var.shape()), var.layout().short_string());
    }
    check_updatable(var, fn);
  }
  const double lr = lr_(step_);
  const int64_t step = step_ + 1;
  for (size_t i = 0; i < vars.size(); ++i) {
    const DVariable& var = vars[i];
    auto& slot_vars = slots_of(var, fn);
    DTensor grad = relayout(grads[i], var.layout());
    update_variable(var, slot_vars, grad, lr, step, in_place);
  }
  ++step_;
}

namespace {

// Holds the locks of slots[i..] in turn (DVariable::update_in_place), collecting their shards in
// `held`, then returns fn(); false as soon as one slot's buffers are held elsewhere.
bool with_slots_held(std::vector<DVariable>& slots, size_t i,
                     std::vector<std::vector<Tensor>>& held, const std::function<bool()>& fn) {
  if (i == slots.size()) return fn();
  return slots[i].update_in_place([&](const std::vector<Tensor>& shards) {
    held.push_back(shards);
    const bool done = with_slots_held(slots, i + 1, held, fn);
    held.pop_back();
    return done;
  });
}

}  // namespace

bool Optimizer::update_held_in_place(const DVariable& var, std::vector<DVariable>& slot_vars,
                                     const DTensor& grad, const std::vector<size_t>& first,
                                     double lr, int64_t step) {
  DVariable target = var;
  return target.update_in_place_with_copy(
      [&](const std::vector<Tensor>& w, const std::vector<Tensor>& copy) {
        std::vector<std::vector<Tensor>> held;
        return with_slots_held(slot_vars, 0, held, [&] {
          for (size_t d = 0; d < w.size(); ++d) {
            if (first[d] != d) continue;  // a replica of computation first[d]: the same buffers
            Tensor var_d = w[d];
            std::vector<Tensor> slots_d;
            for (const std::vector<Tensor>& s : held) slots_d.push_back(s[d]);
            // The copy's replicas share buffers as the variable's do (DVariable::copy_of).
            Tensor copy_d = copy.empty() ? Tensor() : copy[d];
            // false only for an optimizer without an in-place form, before it writes anything
            if (!update_in_place(var_d, grad.shard(d), slots_d, copy.empty() ? nullptr : &copy_d,
                                 lr, step)) {
              return false;
            }
          }
          return true;
        });
      });
}

void Optimizer::update_variable(const DVariable& var, std::vector<DVariable>& slot_vars,
                                const DTensor& grad, double lr, int64_t step, bool in_place) {
  std::optional<DTensor> value = var.value();
  std::vector<std::optional<DTensor>> slot_values;
  for (const DVariable& s : slot_vars) slot_values.emplace_back(s.value());
  // One computation per distinct set of input buffers; replicas share the results.
  const size_t n = value->shards().size(), k = slot_values.size();
  std::vector<size_t> first(n);
  for (size_t d = 0; d < n; ++d) {
    size_t same = d;
    for (size_t e = 0; e < d && same == d; ++e) {
      bool match =
          value->shard(d).is_same_as(value->shard(e)) && grad.shard(d).is_same_as(grad.shard(e));
      for (size_t s = 0; s < k && match; ++s) {
        match = slot_values[s]->shard(d).is_same_as(slot_values[s]->shard(e));
      }
      if (match) same = e;
    }
    first[d] = same;
  }
  // In place only where each computation's buffers are its own (not shared with another
  // computation) on the host, and no one else holds them: checked under the variables' locks
  // once this function has let go of its reads (DVariable::update_in_place).
  bool own = in_place && value->shard(0).device().type == DeviceType::kCPU;
  for (size_t d = 0; d < n && own; ++d) {
    for (size_t e = 0; e < d && own; ++e) {
      if (first[d] == first[e]) continue;
      own = !value->shard(d).shares_storage_with(value->shard(e));
      for (size_t s = 0; s < k && own; ++s) {
        own = !slot_values[s]->shard(d).shares_storage_with(slot_values[s]->shard(e));
      }
    }
  }
  if (own) {
    value.reset();
    slot_values.clear();
    if (update_held_in_place(var, slot_vars, grad, first, lr, step)) return;
    value = var.value();
    for (const DVariable& s : slot_vars) slot_values.emplace_back(s.value());
  }
  // The inputs of each computation, one handle each, and every shard's device.
  std::vector<Tensor> vars_in(n);
  std::vector<std::vector<Tensor>> slots_in(n);
  std::vector<Device> devices;
  for (size_t d = 0; d < n; ++d) {
    devices.push_back(value->shard(d).device());
    if (first[d] != d) continue;
    vars_in[d] = value->shard(d);
    for (size_t s = 0; s < k; ++s) slots_in[d].push_back(slot_values[s]->shard(d));
  }
  DVariable target = var;  // a handle: assigning through the copy updates the variable
  std::vector<Tensor> new_var(n);
  std::vector<std::vector<Tensor>> new_slots(k, std::vector<Tensor>(n));
  for (size_t d = 0; d < n; ++d) {
    const Device device = devices[d];
    if (first[d] != d) {
      new_var[d] = new_var[first[d]].with_device(device);
      for (size_t s = 0; s < k; ++s) new_slots[s][d] = new_slots[s][first[d]].with_device(device);
      continue;
    }
    const Tensor& v = vars_in[d];
    std::vector<Tensor> out_slots;
    for (size_t s = 0; s < k; ++s) out_slots.push_back(Tensor::empty(v.shape(), v.dtype(), device));
    Tensor out = Tensor::empty(v.shape(), v.dtype(), device);
    update(v, grad.shard(d), slots_in[d], out, out_slots, lr, step);
    new_var[d] = out;
    for (size_t s = 0; s < k; ++s) new_slots[s][d] = out_slots[s];
  }
  vars_in.clear();
  slots_in.clear();
  target.assign(DTensor::from_trusted_shards(var.shape(), var.dtype(), var.layout(), new_var));
  for (size_t s = 0; s < k; ++s) {
    slot_vars[s].assign(
        DTensor::from_trusted_shards(var.shape(), var.dtype(), var.layout(), new_slots[s]));
  }
}

SGD::SGD(Schedule lr, double momentum, bool nesterov)
    : Optimizer(std::move(lr), "SGD"), momentum_(momentum), nesterov_(nesterov) {
  if (momentum < 0 || momentum > 1) {
    throw_error<InvalidArgumentError>("SGD", "momentum must be in [0, 1], got {}", momentum);
  }
}

std::vector<std::string> SGD::slot_names() const {
  return momentum_ > 0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
}

void SGD::update(const Tensor& var, const Tensor& grad, const std::vector<Tensor>& slots,
                 Tensor& var_out, std::vector<Tensor>& slots_out, double lr, int64_t) const {
  if (slots.empty()) {
    kernels::sgd_update(var, grad, var_out, lr);
  } else {
    kernels::sgd_momentum_update(var, grad, slots[0], var_out, slots_out[0], lr, momentum_,
                                 nesterov_);
  }
}

bool SGD::update_in_place(Tensor& var, const Tensor& grad, std::vector<Tensor>& slots,
                          Tensor* bf16_copy, double lr, int64_t) const {
  if (slots.empty()) {
    optim_internal::sgd_in_place(var, grad, lr, bf16_copy);
  } else {
    optim_internal::sgd_momentum_in_place(var, grad, slots[0], lr, momentum_, nesterov_, bf16_copy);
  }
  return true;
}

Adam::Adam(Schedule lr, double beta1, double beta2, double epsilon, double weight_decay,
           std::string name)
    : Optimizer(std::move(lr), std::move(name)),
      beta1_(beta1),
      beta2_(beta2),
      epsilon_(epsilon),
      weight_decay_(weight_decay) {
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1 || epsilon < 0) {
    throw_error<InvalidArgumentError>(name_,
                                      "need 0 <= beta1, beta2 < 1 and epsilon >= 0, got {}, {}, {}",
                                      beta1, beta2, epsilon);
  }
}

void Adam::update(const Tensor& var, const Tensor& grad, const std::vector<Tensor>& slots,
                  Tensor& var_out, std::vector<Tensor>& slots_out, double lr, int64_t step) const {
  // tf.keras Adam: lr_t = lr * sqrt(1 - b2^t) / (1 - b1^t); w -= lr_t * m / (sqrt(v) + eps),
  // epsilon added unscaled (the paper's "epsilon hat").
  kernels::adam_update(var, grad, slots[0], slots[1], var_out, slots_out[0], slots_out[1],
                       step_params(lr, step));
}

kernels::AdamStepParams Adam::step_params(double lr, int64_t step) const {
  const double correction = std::sqrt(1 - std::pow(beta2_, static_cast<double>(step))) /
                            (1 - std::pow(beta1_, static_cast<double>(step)));
  return {beta1_, beta2_, lr * correction, epsilon_, 1 - lr * weight_decay_};
}

bool Adam::update_in_place(Tensor& var, const Tensor& grad, std::vector<Tensor>& slots,
                           Tensor* bf16_copy, double lr, int64_t step) const {
  optim_internal::adam_in_place(var, grad, slots[0], slots[1], step_params(lr, step), bf16_copy);
  return true;
}

}  // namespace dtensor
