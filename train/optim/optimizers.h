// Optimizers over DVariables: SGD (momentum, Nesterov), Adam and AdamW, with learning-rate
// schedules, in the semantics of tf.keras.optimizers.
//
// apply(vars, grads) brings each gradient to its variable's layout first (a partial gradient is
// reduced there: that is the data-parallel all-reduce, once per variable), then updates the
// variable and its slots with one fused local kernel per distinct shard: a replicated variable on
// in-process devices is updated once, not once per device. Slots (moments) are DVariables in the
// variable's layout, created on first use and listed by slots() for checkpoints.
//
// A replay of a captured step (train/capture) updates a variable and its slots in place when no
// one else holds their buffers (the variables hold shared-zero stand-ins meanwhile), with the bits
// of the eager update; a value read earlier and still held keeps its contents.
//
// Not thread-safe: one thread applies at a time.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/variable.h"
#include "kernels/optimizer_update.h"

namespace dtensor {

// Learning rate as a function of the step (0-based count of applies so far).
using Schedule = std::function<double(int64_t step)>;
Schedule constant_lr(double lr);
// lr * rate^(step / decay_steps), the exponent floored when `staircase` (tf ExponentialDecay).
Schedule exponential_decay(double lr, int64_t decay_steps, double rate, bool staircase);
// tf CosineDecay: lr * ((1 - alpha) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps))
// + alpha).
Schedule cosine_decay(double lr, int64_t decay_steps, double alpha = 0.0);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  void apply(const std::vector<DVariable>& vars, const std::vector<DTensor>& grads);
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // (name, slot) for every slot created so far, e.g. ("dense_0/kernel/m", ...).
  std::vector<std::pair<std::string, DVariable>> slots() const;
  // Creates the slots of `vars` now, as apply would on first use (zeros in each variable's layout,
  // named "<variable>/<slot>"); variables that have slots keep them. Lets a checkpoint restore
  // fill the slots of a fresh optimizer. Throws DTypeError for a variable that is not f32 or f64.
  void build(const std::vector<DVariable>& vars);

 protected:
  explicit Optimizer(Schedule lr, std::string name) : lr_(std::move(lr)), name_(std::move(name)) {}
  // Slot names this optimizer keeps per variable.
  virtual std::vector<std::string> slot_names() const = 0;
  // One fused pass over a shard: reads var, grad and the slots, writes the new values into
  // `var_out` and `slots_out` (fresh buffers of the same shapes). `step` counts from 1.
  virtual void update(const Tensor& var, const Tensor& grad, const std::vector<Tensor>& slots,
                      Tensor& var_out, std::vector<Tensor>& slots_out, double lr,
                      int64_t step) const = 0;
  // As update, writing into `var` and `slots` themselves (host buffers no one else holds), with
  // the same bits, and, when `bf16_copy` is given, the new values rounded to bf16 into it in the
  // same pass (the variable's bf16 copy, DVariable::copy_of); false, nothing written, when this
  // optimizer has no in-place form (update is used instead).
  virtual bool update_in_place(Tensor& var, const Tensor& grad, std::vector<Tensor>& slots,
                               Tensor* bf16_copy, double lr, int64_t step) const {
    return false;
  }

 private:
  // apply after the trace hook: `in_place` (a replay) updates buffers no one else holds in
  // place; other buffers, and every eager apply, get fresh ones.
  void apply_now(const std::vector<DVariable>& vars, const std::vector<DTensor>& grads,
                 bool in_place);
  void update_variable(const DVariable& var, std::vector<DVariable>& slot_vars, const DTensor& grad,
                       double lr, int64_t step, bool in_place);
  // update_in_place on each computation's buffers (the devices d with first[d] == d), with the
  // variable's and its slots' locks held; false, nothing written, when some buffer is held
  // elsewhere or the optimizer has no in-place form.
  bool update_held_in_place(const DVariable& var, std::vector<DVariable>& slot_vars,
                            const DTensor& grad, const std::vector<size_t>& first, double lr,
                            int64_t step);
  // The slots of `var`, created (zeros) if it has none yet.
  std::vector<DVariable>& slots_of(const DVariable& var, const std::string& function);

  Schedule lr_;

 protected:
  std::string name_;

 private:
  int64_t step_ = 0;
  std::map<int64_t, std::vector<DVariable>> slots_;  // by variable id
  std::map<int64_t, std::string> var_names_;
};

class SGD final : public Optimizer {
 public:
  explicit SGD(Schedule lr, double momentum = 0.0, bool nesterov = false);
  explicit SGD(double lr, double momentum = 0.0, bool nesterov = false)
      : SGD(constant_lr(lr), momentum, nesterov) {}

 private:
  std::vector<std::string> slot_names() const override;
  void update(const Tensor& var, const Tensor& grad, const std::vector<Tensor>& slots,
              Tensor& var_out, std::vector<Tensor>& slots_out, double lr,
              int64_t step) const override;
  bool update_in_place(Tensor& var, const Tensor& grad, std::vector<Tensor>& slots,
                       Tensor* bf16_copy, double lr, int64_t step) const override;
  double momentum_;
  bool nesterov_;
};

class Adam : public Optimizer {
 public:
  explicit Adam(Schedule lr, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-7,
                double weight_decay = 0.0, std::string name = "Adam");
  explicit Adam(double lr, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-7)
      : Adam(constant_lr(lr), beta1, beta2, epsilon) {}

 private:
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }
  void update(const Tensor& var, const Tensor& grad, const std::vector<Tensor>& slots,
              Tensor& var_out, std::vector<Tensor>& slots_out, double lr,
              int64_t step) const override;
  bool update_in_place(Tensor& var, const Tensor& grad, std::vector<Tensor>& slots,
                       Tensor* bf16_copy, double lr, int64_t step) const override;
  // The kernel's parameters for `step` (bias correction, decoupled decay).
  kernels::AdamStepParams step_params(double lr, int64_t step) const;
  double beta1_, beta2_, epsilon_, weight_decay_;
};

// Adam with decoupled weight decay: var -= lr * weight_decay * var before the Adam step.
class AdamW final : public Adam {
 public:
  AdamW(Schedule lr, double weight_decay, double beta1 = 0.9, double beta2 = 0.999,
        double epsilon = 1e-7)
      : Adam(std::move(lr), beta1, beta2, epsilon, weight_decay, "AdamW") {}
};

}  // namespace dtensor
