#include "dtensor/variable.h"

#include <atomic>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "dtensor/relayout.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"

namespace dtensor {

struct DVariable::State {
  int64_t id;
  int64_t value_id;  // the DTensor id of every value held
  std::string name;
  Layout layout;
  Shape shape;
  DType dtype;
  mutable std::mutex mu;
  DTensor value;
  std::optional<DTensor> copy;  // the value in another dtype (copy_of); dropped when it changes
};

namespace {

std::atomic<int64_t> next_variable_id{1};

template <typename T>
void add_scaled(T* out, const T* a, const T* b, int64_t n, int sign) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = BFloat16(static_cast<float>(a[i]) + sign * static_cast<float>(b[i]));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + sign * b[i]);
  }
}

// a + sign * b shard by shard: a loop over host memory, the add or sub kernel on a device. Pairs
// of shards that share storage (replicated devices) are computed once and the result shared
// again (a few shards: a linear scan).
std::vector<Tensor> add_shards(const DTensor& a, const DTensor& b, int sign) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < a.shards().size(); ++i) {
    const Tensor& x = a.shards()[i];
    const Tensor& y = b.shards()[i];
    size_t j = 0;
    while (j < i && !(a.shards()[j].is_same_as(x) && b.shards()[j].is_same_as(y))) ++j;
    if (j < i) {
      out.push_back(out[j].with_device(x.device()));
      continue;
    }
    if (x.memory_space() != MemorySpace::kHost) {
      using kernels::BinaryOp;
      out.push_back(kernels::binary(sign > 0 ? BinaryOp::kAdd : BinaryOp::kSub, x, y));
      continue;
    }
    Tensor r = Tensor::empty(x.shape(), x.dtype(), x.device());
    visit_dtype(x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if constexpr (!std::is_same_v<T, bool>) {
        add_scaled(static_cast<T*>(r.raw_data()), static_cast<const T*>(x.raw_data()),
                   static_cast<const T*>(y.raw_data()), x.num_elements(), sign);
      }
    });
    out.push_back(std::move(r));
  }
  return out;
}

// Live variables by the DTensor id of their values, for copy_of. Expired entries are swept as
// new variables come.
struct Registry {
  std::mutex mu;
  std::unordered_map<int64_t, std::weak_ptr<void>> by_value_id;
  size_t sweep_at = 64;

  void add(int64_t value_id, const std::shared_ptr<void>& state) {
    std::lock_guard<std::mutex> lock(mu);
    by_value_id[value_id] = state;
    if (by_value_id.size() < sweep_at) return;
    for (auto it = by_value_id.begin(); it != by_value_id.end();) {
      it = it->second.expired() ? by_value_id.erase(it) : std::next(it);
    }
    sweep_at = 2 * by_value_id.size() + 64;
  }

  std::shared_ptr<void> find(int64_t value_id) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = by_value_id.find(value_id);
    return it == by_value_id.end() ? nullptr : it->second.lock();
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: variables may outlive static teardown
  return *r;
}

bool same_shards(const DTensor& a, const DTensor& b) {
  if (a.shards().size() != b.shards().size()) return false;
  for (size_t i = 0; i < a.shards().size(); ++i) {
    if (!a.shards()[i].is_same_as(b.shards()[i])) return false;
  }
  return true;
}

// x in `dtype`, shard by shard; shards that share storage give copies that share storage.
DTensor cast_shards(const DTensor& x, DType dtype) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < x.shards().size(); ++i) {
    size_t j = 0;
    while (j < i && !x.shards()[j].is_same_as(x.shards()[i])) ++j;
    out.push_back(j < i ? out[j].with_device(x.shards()[i].device())
                        : kernels::cast(x.shards()[i], dtype));
  }
  return DTensor::from_trusted_shards(x.shape(), dtype, x.layout(), std::move(out));
}

// True when the only holders of `shards`' buffers are those shards (replicas may share one).
bool held_only_by(const std::vector<Tensor>& shards) {
  for (const Tensor& t : shards) {
    int64_t own = 0;
    for (const Tensor& u : shards) own += u.shares_storage_with(t) ? 1 : 0;
    if (t.holders() != own || t.is_shared_zeros()) return false;
  }
  return true;
}

}  // namespace

DVariable::DVariable(const DTensor& initial, std::string name) {
  if (initial.layout().is_partial()) {
    throw_error<LayoutError>("DVariable", "variable '{}' cannot have partial layout {}", name,
                             initial.layout().short_string());
  }
  const int64_t value_id = DTensor::next_id();
  state_ = std::shared_ptr<State>(new State{next_variable_id.fetch_add(1),
                                            value_id,
                                            std::move(name),
                                            initial.layout(),
                                            initial.shape(),
                                            initial.dtype(),
                                            {},
                                            initial.with_id(value_id),
                                            std::nullopt});
  registry().add(value_id, state_);
}

int64_t DVariable::id() const { return state_->id; }
const std::string& DVariable::name() const { return state_->name; }
const Layout& DVariable::layout() const { return state_->layout; }
const Shape& DVariable::shape() const { return state_->shape; }
DType DVariable::dtype() const { return state_->dtype; }

DTensor DVariable::value() const {
  // Traced: a replay reads the variable's value at that time, not the one seen while tracing.
  if (StepObserver* hook = StepObserver::active()) {
    return hook->call("DVariable::value", {},
                      [self = *this](const StepObserver::Inputs&) { return self.value(); });
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->value;
}

namespace {

DTensor conform(const DTensor& value, const Layout& layout, const Shape& shape, DType dtype,
                const std::string& name, const char* function) {
  if (value.shape() != shape || value.dtype() != dtype) {
    throw_error<ShapeError>(function, "variable '{}' is {}{}, the value is {}", name,
                            dtype_name(dtype), shape_to_string(shape), value.short_string());
  }
  if (value.mesh() != layout.mesh()) {
    const auto [variable_mesh, value_mesh] = distinct_mesh_strings(layout.mesh(), value.mesh());
    throw_error<LayoutError>(function, "variable '{}' lives on mesh {}, the value on mesh {}", name,
                             variable_mesh, value_mesh);
  }
  return relayout(value, layout);
}

}  // namespace

void DVariable::assign(const DTensor& value) {
  if (StepObserver* hook = StepObserver::active()) {
    hook->effect("DVariable::assign", {&value}, [self = *this](const StepObserver::Inputs& in) {
      DVariable target = self;
      target.assign(*in[0]);
    });
    return;
  }
  DTensor v = conform(value, layout(), shape(), dtype(), name(), "DVariable::assign");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->value = v.with_id(state_->value_id);
  state_->copy.reset();
}

bool DVariable::update_in_place(
    const std::function<bool(const std::vector<Tensor>& shards)>& update) {
  std::lock_guard<std::mutex> lock(state_->mu);
  // Shards of replicas may share one buffer: it is the variable's alone when its only holders
  // are those shards.
  if (!held_only_by(state_->value.shards_)) return false;
  state_->copy.reset();  // `update` does not write it
  return update(state_->value.shards_);
}

bool DVariable::update_in_place_with_copy(
    const std::function<bool(const std::vector<Tensor>& shards, const std::vector<Tensor>& copy)>&
        update) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const std::vector<Tensor>& shards = state_->value.shards_;
  if (!held_only_by(shards)) return false;
  std::optional<DTensor> copy = std::move(state_->copy);
  state_->copy.reset();
  const bool refresh = copy && held_only_by(copy->shards());
  const bool done = update(shards, refresh ? copy->shards() : std::vector<Tensor>{});
  if (done && refresh) state_->copy = std::move(copy);
  return done;
}

std::optional<DTensor> DVariable::copy_of(const DTensor& value, DType dtype) {
  std::shared_ptr<State> state = std::static_pointer_cast<State>(registry().find(value.id()));
  if (!state) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (!same_shards(state->value, value)) return std::nullopt;
  }
  // Traced: a replay reads the copy the variable holds then.
  if (StepObserver* hook = StepObserver::active()) {
    return hook->call("DVariable::copy_of", {&value}, [dtype](const StepObserver::Inputs& in) {
      std::optional<DTensor> copy = copy_of(*in[0], dtype);
      return copy ? *copy : cast_shards(*in[0], dtype);
    });
  }
  std::lock_guard<std::mutex> lock(state->mu);
  if (!same_shards(state->value, value)) return std::nullopt;  // updated meanwhile
  if (!state->copy || state->copy->dtype() != dtype) state->copy = cast_shards(value, dtype);
  return state->copy;
}

void DVariable::assign_add(const DTensor& delta) {
  if (StepObserver* hook = StepObserver::active()) {
    hook->effect("DVariable::assign_add", {&delta}, [self = *this](const StepObserver::Inputs& in) {
      DVariable target = self;
      target.assign_add(*in[0]);
    });
    return;
  }
  if (dtype() == DType::kBool) {
    throw_error<DTypeError>("DVariable::assign_add", "variable '{}' is bool", name());
  }
  DTensor d = conform(delta, layout(), shape(), dtype(), name(), "DVariable::assign_add");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->value =
      DTensor::from_trusted_shards(shape(), dtype(), layout(), add_shards(state_->value, d, +1))
          .with_id(state_->value_id);
  state_->copy.reset();
}

void DVariable::assign_sub(const DTensor& delta) {
  if (StepObserver* hook = StepObserver::active()) {
    hook->effect("DVariable::assign_sub", {&delta}, [self = *this](const StepObserver::Inputs& in) {
      DVariable target = self;
      target.assign_sub(*in[0]);
    });
    return;
  }
  if (dtype() == DType::kBool) {
    throw_error<DTypeError>("DVariable::assign_sub", "variable '{}' is bool", name());
  }
  DTensor d = conform(delta, layout(), shape(), dtype(), name(), "DVariable::assign_sub");
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->value =
      DTensor::from_trusted_shards(shape(), dtype(), layout(), add_shards(state_->value, d, -1))
          .with_id(state_->value_id);
  state_->copy.reset();
}

}  // namespace dtensor
