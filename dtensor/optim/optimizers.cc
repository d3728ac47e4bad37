#include "dtensor/optim/optimizers.h"

#include <cmath>

#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "runtime/thread_pool.h"

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
    DTensor value = var.value();
    std::vector<DTensor> slot_values;
    for (const DVariable& s : slot_vars) slot_values.push_back(s.value());
    // One computation per distinct set of input buffers; replicas share the results.
    const size_t n = value.shards().size(), k = slot_values.size();
    std::vector<Tensor> new_var(n);
    std::vector<std::vector<Tensor>> new_slots(k, std::vector<Tensor>(n));
    for (size_t d = 0; d < n; ++d) {
      size_t same = d;
      for (size_t e = 0; e < d && same == d; ++e) {
        bool match = value.shard(d).is_same_as(value.shard(e)) &&
                     grad.shard(d).is_same_as(grad.shard(e));
        for (size_t s = 0; s < k && match; ++s) {
          match = slot_values[s].shard(d).is_same_as(slot_values[s].shard(e));
        }
        if (match) same = e;
      }
      const Device device = value.shard(d).device();
      if (same != d) {
        new_var[d] = new_var[same].with_device(device);
        for (size_t s = 0; s < k; ++s) new_slots[s][d] = new_slots[s][same].with_device(device);
        continue;
      }
      const Tensor& v = value.shard(d);
      std::vector<Tensor> in_slots, out_slots;
      for (size_t s = 0; s < k; ++s) {
        in_slots.push_back(slot_values[s].shard(d));
        out_slots.push_back(Tensor::empty(v.shape(), v.dtype(), device));
      }
      Tensor out = Tensor::empty(v.shape(), v.dtype(), device);
      update(v, grad.shard(d), in_slots, out, out_slots, lr, step);
      new_var[d] = out;
      for (size_t s = 0; s < k; ++s) new_slots[s][d] = out_slots[s];
    }
    DVariable target = var;  // a handle: assigning through the copy updates the variable
    target.assign(DTensor::from_trusted_shards(var.shape(), var.dtype(), var.layout(), new_var));
    for (size_t s = 0; s < k; ++s) {
      slot_vars[s].assign(
          DTensor::from_trusted_shards(var.shape(), var.dtype(), var.layout(), new_slots[s]));
    }
  }
  ++step_;
}

namespace {

template <typename Fn>
void for_float(const Tensor& t, Fn&& fn) {
  if (t.dtype() == DType::kF32)
    fn(float{});
  else
    fn(double{});
}

template <typename T>
struct AdamStep {
  T b1, b2, lr_t, eps, decay;
};

// Elements [begin, end) of the fused Adam update. The buffers are parameters, not captures: the
// compiler can then see they do not alias and vectorises the loop (sqrt and divide included).
template <typename T>
void adam_range(const AdamStep<T> a, const T* __restrict w, const T* __restrict g,
                const T* __restrict m, const T* __restrict v, T* __restrict w_out,
                T* __restrict m_out, T* __restrict v_out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const T mi = a.b1 * m[i] + (1 - a.b1) * g[i];
    const T vi = a.b2 * v[i] + (1 - a.b2) * g[i] * g[i];
    m_out[i] = mi;
    v_out[i] = vi;
    w_out[i] = w[i] * a.decay - a.lr_t * mi / (std::sqrt(vi) + a.eps);
  }
}

}  // namespace

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
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    const T* w = var.data<T>();
    const T* g = grad.data<T>();
    T* out = var_out.data<T>();
    const int64_t n = var.num_elements();
    const T a = static_cast<T>(lr);
    if (slots.empty()) {
      for (int64_t i = 0; i < n; ++i) out[i] = w[i] - a * g[i];
      return;
    }
    // Keras: velocity = momentum * velocity - lr * g; w += velocity (Nesterov: w += momentum *
    // velocity - lr * g).
    const T mu = static_cast<T>(momentum_);
    const T* v = slots[0].data<T>();
    T* v_out = slots_out[0].data<T>();
    for (int64_t i = 0; i < n; ++i) {
      T vel = mu * v[i] - a * g[i];
      v_out[i] = vel;
      out[i] = nesterov_ ? w[i] + mu * vel - a * g[i] : w[i] + vel;
    }
  });
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
  const double correction = std::sqrt(1 - std::pow(beta2_, static_cast<double>(step))) /
                            (1 - std::pow(beta1_, static_cast<double>(step)));
  const double eps_hat = epsilon_;
  for_float(var, [&](auto zero) {
    using T = decltype(zero);
    AdamStep<T> a{static_cast<T>(beta1_), static_cast<T>(beta2_),
                  static_cast<T>(lr * correction), static_cast<T>(eps_hat),
                  static_cast<T>(1 - lr * weight_decay_)};
    const T* w = var.data<T>();
    const T* g = grad.data<T>();
    const T* m = slots[0].data<T>();
    const T* v = slots[1].data<T>();
    T* w_out = var_out.data<T>();
    T* m_out = slots_out[0].data<T>();
    T* v_out = slots_out[1].data<T>();
    const int64_t n = var.num_elements();
    ThreadPool& pool = ThreadPool::global();
    if (n < (1 << 16) || ThreadPool::in_worker()) {
      adam_range(a, w, g, m, v, w_out, m_out, v_out, 0, n);
    } else {
      const int64_t parts = pool.num_threads();
      pool.parallel_for(parts, [&](int64_t p) {
        ShardRange r = chunk_range(n, parts, p);
        adam_range(a, w, g, m, v, w_out, m_out, v_out, r.offset, r.offset + r.size);
      });
    }
  });
}

}  // namespace dtensor
