// ExponentialMovingAverage: shadow copies of variables that follow their moving average, for
// evaluating with averaged weights (tf.train.ExponentialMovingAverage, as TensorFlow's CIFAR-10
// tutorial uses it with decay 0.9999).
//
// apply(vars) after each optimizer step updates every shadow:
//   shadow = decay_n * shadow + (1 - decay_n) * var,   decay_n = min(decay, (1 + n) / (10 + n))
// where n counts the applies before this one (num_updates; TF's num_updates argument fed with the
// step) when debiasing is on, so early averages follow the variables instead of their initial
// values; without it decay_n = decay. A variable's shadow is created on its first apply (or by
// track()) as a copy of its value, named "<variable>/ExponentialMovingAverage", in the variable's
// layout: a sharded variable keeps a sharded shadow, a replicated one on in-process devices one
// shared buffer. The update is one fused pass per distinct shard on CPU devices (into a fresh
// buffer: values read from a shadow earlier keep their contents) and DTensor ops elsewhere.
//
// Evaluating with the averages: `auto swap = ema.swap_in(vars);` assigns each shadow's value to
// its variable and puts the training values back when `swap` is destroyed (or on restore()).
// Only handles move, no values are copied.
//
// Checkpoints: track_in(checkpoint, prefix) adds the shadows (as "<prefix>/<shadow name>") and
// num_updates (as "<prefix>/num_updates"); call track() for the variables first so that the
// shadows exist to restore into, in whatever mesh and layout the restoring run uses.
//
// Holds handles to the variables it averages (by DVariable id). Not thread-safe: one thread at a
// time, and no apply while a Swap is alive.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/variable.h"

namespace dtensor {

class Checkpoint;

class ExponentialMovingAverage {
 public:
  // InvalidArgumentError unless 0 <= decay <= 1.
  explicit ExponentialMovingAverage(double decay, bool debias = true);
  ExponentialMovingAverage(const ExponentialMovingAverage&) = delete;
  ExponentialMovingAverage& operator=(const ExponentialMovingAverage&) = delete;

  // Creates the shadows of `vars` that do not exist yet (copies of their current values).
  // DTypeError for a variable that is not f32 or f64.
  void track(const std::vector<DVariable>& vars);
  // One update of the shadows of `vars` (created first if needed), then ++num_updates. Every
  // variable is checked before anything changes.
  void apply(const std::vector<DVariable>& vars);

  // The decay the next apply uses.
  double current_decay() const;
  double decay() const { return decay_; }
  int64_t num_updates() const { return num_updates_; }
  void set_num_updates(int64_t n);

  // The shadow of `var`; InvalidArgumentError naming it if it has none.
  DVariable average(const DVariable& var) const;
  // (name, shadow) for every shadow, in creation order.
  std::vector<std::pair<std::string, DVariable>> shadows() const;

  // Adds the shadows and num_updates to `checkpoint` (see above). The EMA must outlive it.
  void track_in(Checkpoint& checkpoint, const std::string& prefix);

  // Variables holding their averages for its lifetime (see above). Movable, not copyable.
  class Swap {
   public:
    Swap(Swap&& other) noexcept;
    Swap& operator=(Swap&&) = delete;
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;
    ~Swap();
    // Puts the training values back now (idempotent).
    void restore();

   private:
    friend class ExponentialMovingAverage;
    Swap() = default;
    std::vector<std::pair<DVariable, DTensor>> saved_;  // variable, its training value
  };
  // InvalidArgumentError if a variable has no shadow.
  [[nodiscard]] Swap swap_in(const std::vector<DVariable>& vars) const;

 private:
  const DVariable* find(const DVariable& var) const;

  double decay_;
  bool debias_;
  int64_t num_updates_ = 0;
  std::vector<DVariable> shadows_;          // creation order
  std::map<int64_t, size_t> shadow_index_;  // variable id -> index in shadows_
};

}  // namespace dtensor
