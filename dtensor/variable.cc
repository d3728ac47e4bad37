#include "dtensor/variable.h"

#include <atomic>
#include <mutex>

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
                                            initial.with_id(value_id)});
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
}

bool DVariable::update_in_place(
    const std::function<bool(const std::vector<Tensor>& shards)>& update) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const std::vector<Tensor>& shards = state_->value.shards_;
  for (const Tensor& t : shards) {
    // Shards of replicas may share one buffer: it is the variable's alone when its only holders
    // are those shards.
    int64_t own = 0;
    for (const Tensor& u : shards) own += u.shares_storage_with(t) ? 1 : 0;
    if (t.holders() != own || t.is_shared_zeros()) return false;
  }
  return update(shards);
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
}

}  // namespace dtensor
