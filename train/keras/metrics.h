// Losses and metrics for keras::Trainer, in tf.keras's semantics.
//
// A Loss maps (labels, predictions) to per-example losses ([batch], batch-sharded like its
// inputs); the trainer averages them over the global batch. A Metric is stateful: update()
// accumulates one batch, result() reads the value so far, reset() starts over. The mean metrics
// keep a running total and count in doubles on the host (every process holds the same values:
// batch sums are all-reduced), so an epoch's value is the mean over all its examples however the
// batches were split over replicas.
//
// Metric state is exposed to checkpoints through track_state (StateRefs), so that a run resumed
// mid-epoch reports the same epoch metrics as one that was never interrupted.
//
// Not thread-safe; metrics are used from the training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/variable.h"

namespace dtensor::keras {

// Per-example loss of (labels, predictions).
using Loss = std::function<DTensor(const DTensor& labels, const DTensor& predictions)>;

// Integer labels [batch] against logits (from_logits) or probabilities [batch, classes]
// (tf.keras.losses.SparseCategoricalCrossentropy with reduction NONE; probabilities are clipped
// to [1e-7, 1 - 1e-7] as Keras does).
Loss sparse_categorical_crossentropy(bool from_logits = true);

// Named references to mutable state, for checkpoints: an object lists its counters, its
// floating-point accumulators and its variables under names starting with `prefix`.
struct StateRefs {
  std::vector<std::pair<std::string, int64_t*>> ints;
  std::vector<std::pair<std::string, double*>> doubles;
  std::vector<std::pair<std::string, DVariable>> variables;
};

class Metric {
 public:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  virtual ~Metric() = default;
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  const std::string& name() const { return name_; }
  virtual void reset() = 0;
  // Accumulates one batch of integer labels [batch] and predictions [batch, ...].
  virtual void update(const DTensor& labels, const DTensor& predictions) = 0;
  virtual double result() const = 0;
  // Adds this metric's state under `prefix` (e.g. "metrics/accuracy/").
  virtual void track_state(const std::string& prefix, StateRefs& refs) = 0;

 private:
  std::string name_;
};

// A weighted running mean (tf.keras.metrics.Mean): result() = total / count, 0 when empty.
class Mean : public Metric {
 public:
  explicit Mean(std::string name = "mean") : Metric(std::move(name)) {}

  // Adds every element of `values` with weight 1 (one all-reduce for a sharded value).
  void update_state(const DTensor& values);
  // Adds `value` with weight `weight` (>= 0, InvalidArgumentError otherwise).
  void update_state(double value, double weight = 1.0);
  // Averages `predictions` (labels ignored), so a Mean can sit in a metrics list.
  void update(const DTensor& labels, const DTensor& predictions) override;

  void reset() override { total_ = count_ = 0; }
  double result() const override { return count_ > 0 ? total_ / count_ : 0.0; }
  void track_state(const std::string& prefix, StateRefs& refs) override;
  double total() const { return total_; }
  double count() const { return count_; }

 private:
  double total_ = 0, count_ = 0;
};

// The mean over examples of fn(labels, predictions) (tf.keras.metrics.MeanMetricWrapper).
class MeanMetricWrapper : public Metric {
 public:
  MeanMetricWrapper(std::string name, Loss fn) : Metric(name), fn_(std::move(fn)), mean_(name) {}

  void update(const DTensor& labels, const DTensor& predictions) override {
    mean_.update_state(fn_(labels, predictions));
  }
  void reset() override { mean_.reset(); }
  double result() const override { return mean_.result(); }
  void track_state(const std::string& prefix, StateRefs& refs) override {
    mean_.track_state(prefix, refs);
  }

 private:
  Loss fn_;
  Mean mean_;
};

// Fraction of examples whose arg-max prediction equals the integer label
// (tf.keras.metrics.SparseCategoricalAccuracy; "accuracy" in compile()).
class SparseCategoricalAccuracy : public MeanMetricWrapper {
 public:
  explicit SparseCategoricalAccuracy(std::string name = "accuracy");
};

// Mean sparse categorical cross-entropy, as a metric.
class SparseCategoricalCrossentropy : public MeanMetricWrapper {
 public:
  explicit SparseCategoricalCrossentropy(bool from_logits = true,
                                         std::string name = "sparse_categorical_crossentropy")
      : MeanMetricWrapper(std::move(name), sparse_categorical_crossentropy(from_logits)) {}
};

}  // namespace dtensor::keras
