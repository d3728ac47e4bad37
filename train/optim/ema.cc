#include "train/optim/ema.h"

#include <algorithm>

#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"

namespace dtensor {
namespace {

constexpr const char* kSuffix = "/ExponentialMovingAverage";

void check_averageable(const DVariable& var, const char* function) {
  if (var.dtype() != DType::kF32 && var.dtype() != DType::kF64) {
    throw_error<DTypeError>(function, "variable '{}' is {}; f32 and f64 are supported", var.name(),
                            dtype_name(var.dtype()));
  }
}

// out[i] = shadow[i] - (1 - decay) * (shadow[i] - var[i]), TF's form of the update (exact when
// var == shadow). Parameters, not captures, so that the compiler sees no aliasing and vectorises.
template <typename T>
void ema_range(T keep, const T* __restrict shadow, const T* __restrict var, T* __restrict out,
               int64_t begin, int64_t end) {
  const T take = 1 - keep;
  for (int64_t i = begin; i < end; ++i) out[i] = shadow[i] - take * (shadow[i] - var[i]);
}

// The fused update of one shard in host memory, on the calling thread: a memory-bound pass (the
// tutorial's model averages about 1M values per step, well under a millisecond).
void ema_shard(const Tensor& shadow, const Tensor& var, Tensor& out, double decay) {
  if (shadow.dtype() == DType::kF32) {
    ema_range(static_cast<float>(decay), shadow.data<float>(), var.data<float>(), out.data<float>(),
              0, shadow.num_elements());
  } else {
    ema_range(decay, shadow.data<double>(), var.data<double>(), out.data<double>(), 0,
              shadow.num_elements());
  }
}

// The new value of one shadow: one pass per distinct (shadow, variable) shard pair, replicas
// sharing the result (a replicated variable on in-process devices is averaged once).
DTensor averaged(const DVariable& shadow, const DVariable& var, double decay) {
  DTensor s = shadow.value();
  DTensor v = var.value();
  if (s.mesh().device_type() != DeviceType::kCPU) {
    return sub(s, scale(sub(s, v), 1 - decay));
  }
  const size_t n = s.shards().size();
  std::vector<Tensor> out(n);
  for (size_t d = 0; d < n; ++d) {
    const Device device = s.shard(d).device();
    size_t same = d;
    for (size_t e = 0; e < d && same == d; ++e) {
      if (s.shard(d).is_same_as(s.shard(e)) && v.shard(d).is_same_as(v.shard(e))) same = e;
    }
    if (same != d) {
      out[d] = out[same].with_device(device);
      continue;
    }
    out[d] = Tensor::empty(s.shard(d).shape(), s.dtype(), device);
    ema_shard(s.shard(d), v.shard(d), out[d], decay);
  }
  return DTensor::from_trusted_shards(s.shape(), s.dtype(), s.layout(), std::move(out));
}

}  // namespace

ExponentialMovingAverage::ExponentialMovingAverage(double decay, bool debias)
    : decay_(decay), debias_(debias) {
  if (!(decay >= 0 && decay <= 1)) {
    throw_error<InvalidArgumentError>("ExponentialMovingAverage", "decay must be in [0, 1], got {}",
                                      decay);
  }
}

double ExponentialMovingAverage::current_decay() const {
  if (!debias_) return decay_;
  const double n = static_cast<double>(num_updates_);
  return std::min(decay_, (1 + n) / (10 + n));
}

void ExponentialMovingAverage::set_num_updates(int64_t n) {
  if (n < 0) {
    throw_error<InvalidArgumentError>("ExponentialMovingAverage::set_num_updates",
                                      "num_updates must be >= 0, got {}", n);
  }
  num_updates_ = n;
}

const DVariable* ExponentialMovingAverage::find(const DVariable& var) const {
  auto it = shadow_index_.find(var.id());
  return it == shadow_index_.end() ? nullptr : &shadows_[it->second];
}

void ExponentialMovingAverage::track(const std::vector<DVariable>& vars) {
  for (const DVariable& var : vars) check_averageable(var, "ExponentialMovingAverage::track");
  for (const DVariable& var : vars) {
    if (find(var) != nullptr) continue;
    shadow_index_.emplace(var.id(), shadows_.size());
    shadows_.emplace_back(var.value(), var.name() + kSuffix);
  }
}

void ExponentialMovingAverage::apply(const std::vector<DVariable>& vars) {
  for (const DVariable& var : vars) check_averageable(var, "ExponentialMovingAverage::apply");
  track(vars);
  const double decay = current_decay();
  for (const DVariable& var : vars) {
    DVariable shadow = *find(var);  // a handle: assigning through it updates the shadow
    shadow.assign(averaged(shadow, var, decay));
  }
  ++num_updates_;
}

DVariable ExponentialMovingAverage::average(const DVariable& var) const {
  const DVariable* shadow = find(var);
  if (shadow == nullptr) {
    throw_error<InvalidArgumentError>("ExponentialMovingAverage::average",
                                      "variable '{}' has no moving average", var.name());
  }
  return *shadow;
}

std::vector<std::pair<std::string, DVariable>> ExponentialMovingAverage::shadows() const {
  std::vector<std::pair<std::string, DVariable>> out;
  for (const DVariable& s : shadows_) out.emplace_back(s.name(), s);
  return out;
}

void ExponentialMovingAverage::track_in(Checkpoint& checkpoint, const std::string& prefix) {
  checkpoint.add_variables(prefix, shadows_);
  checkpoint.add_int(prefix + "/num_updates", &num_updates_);
}

ExponentialMovingAverage::Swap ExponentialMovingAverage::swap_in(
    const std::vector<DVariable>& vars) const {
  std::vector<DVariable> shadows;
  for (const DVariable& var : vars) {
    const DVariable* shadow = find(var);
    if (shadow == nullptr) {
      throw_error<InvalidArgumentError>("ExponentialMovingAverage::swap_in",
                                        "variable '{}' has no moving average", var.name());
    }
    shadows.push_back(*shadow);
  }
  Swap swap;
  for (size_t i = 0; i < vars.size(); ++i) {
    swap.saved_.emplace_back(vars[i], vars[i].value());
    DVariable target = vars[i];
    target.assign(shadows[i].value());
  }
  return swap;
}

ExponentialMovingAverage::Swap::Swap(Swap&& other) noexcept : saved_(std::move(other.saved_)) {
  other.saved_.clear();
}

ExponentialMovingAverage::Swap::~Swap() { restore(); }

void ExponentialMovingAverage::Swap::restore() {
  for (auto& [var, value] : saved_) var.assign(value);
  saved_.clear();
}

}  // namespace dtensor
