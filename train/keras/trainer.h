// Trainer: a compiled model with Keras's fit / evaluate / predict.
//
//   keras::Trainer trainer(model, optimizer, keras::sparse_categorical_crossentropy(),
//                          keras::metrics_list<keras::SparseCategoricalAccuracy>());
//   keras::FitOptions options;
//   options.epochs = 3;
//   options.validation_data = &test;
//   options.callbacks = {&checkpoint, &early_stopping};
//   keras::History history = trainer.fit(train, options);
//
// A train step reads one global batch, computes the per-example losses of the model's
// predictions, averages them over the global batch, takes the gradient with a GradientTape and
// applies it with the optimizer. That much runs as a captured step (dtensor::function: traced on
// the first batch of each shape, replayed after, to eager's bits) unless run_eagerly is set
// (Keras's compile(run_eagerly=True)); the loss and metric trackers read the results outside it.
// Nothing here is specific to one device or many: the batch's layout (batch-sharded from a Dataset,
// e.g. Strategy::experimental_distribute_dataset of any strategy in strategy.h) and the variables'
// layouts decide the parallelism, and the gradient of each replicated variable is all-reduced
// once, where the tape brings it to the variable's layout.
//
// Data. fit draws batches with next() from the dataset's current position; an epoch is
// steps_per_epoch batches (default: the dataset's batches_per_epoch()). Configure repeat() so the
// data lasts; if next() runs out, training stops there (Keras's "input ran out of data"), after
// finishing the epoch if it ran any batch of it. evaluate() rewinds its dataset to (0, 0) and runs
// `steps` batches or one epoch of it.
//
// Resuming. The training state is the model's variables, the optimizer (step and slots), the
// training dataset's position, the counters below, the loss and metric accumulators, and the
// callbacks' track_state. Checkpoint callbacks save it (checkpoint_callbacks.h); a fit that
// restores it continues at the saved epoch and batch, and ends with the same bits as a fit that
// was never interrupted, given the same model, optimizer, data pipeline and callback list.
//
// Ownership: the trainer refers to the model and optimizer (they must outlive it) and owns the
// metrics. Not thread-safe.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "train/capture/function.h"
#include "train/data/dataset.h"
#include "train/keras/callbacks.h"
#include "train/keras/metrics.h"
#include "train/keras/model.h"
#include "train/optim/optimizers.h"

namespace dtensor::keras {

// fit's output (tf.keras.callbacks.History): the epochs it ran and, per log name, one value per
// epoch that logged it (val_* only for epochs with validation).
struct History {
  std::vector<int64_t> epochs;
  std::map<std::string, std::vector<double>> history;
};

enum class Verbosity {
  kAuto,         // a progress bar on a terminal, else one line per epoch; process 0 only
  kSilent,       // nothing
  kProgressBar,  // verbose=1
  kEpochLines,   // verbose=2
};

struct FitOptions {
  int64_t epochs = 1;
  int64_t initial_epoch = 0;    // the epoch to start from when nothing is restored
  int64_t steps_per_epoch = 0;  // 0: the training dataset's batches_per_epoch()
  data::Dataset* validation_data = nullptr;
  int64_t validation_steps = 0;  // 0: one epoch of the validation data
  int64_t validation_freq = 1;   // validate after every n-th epoch (epochs n-1, 2n-1, ...)
  std::vector<Callback*> callbacks;
  Verbosity verbose = Verbosity::kAuto;
  std::ostream* progress_output = nullptr;  // where verbose output goes; std::cout when null
};

struct EvaluateOptions {
  int64_t steps = 0;  // 0: one epoch of the dataset
  std::vector<Callback*> callbacks;
};

// Where fit stands; saved with the training state.
struct TrainingCounters {
  int64_t epoch = 0;          // the epoch in progress; after an epoch ends, the next one
  int64_t step_in_epoch = 0;  // train batches done in it
  int64_t global_step = 0;    // train batches done by this trainer, over every fit
  int64_t stop_training = 0;  // 1 once training was asked to stop
};

// What the fit in progress was asked to do (a callback's `params` in Keras).
struct FitParams {
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
};

class Trainer {
 public:
  // InvalidArgumentError for an empty loss, a null metric, or metric names that repeat or are
  // "loss".
  Trainer(Model& model, Optimizer& optimizer, Loss loss,
          std::vector<std::unique_ptr<Metric>> metrics = {});
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains for options.epochs epochs (see the header comment). Throws InvalidArgumentError for
  // bad options (negative counts, validation_freq < 1, a null callback, no batches per epoch,
  // validation_data that is `train` itself); MeshError when the training or validation data is on
  // another mesh than the model's variables (a model and data of different strategies);
  // exceptions from the model, the data or a callback end the fit and propagate.
  History fit(data::Dataset& train, const FitOptions& options = {});
  // The loss and metrics over `data` ("loss", metric names). Leaves the training metrics as they
  // were. MeshError as fit's for data on another mesh than the model's variables.
  Logs evaluate(data::Dataset& data, const EvaluateOptions& options = {});
  // model.call(inputs, /*training=*/false).
  DTensor predict(const DTensor& inputs);

  // One optimisation step on `batch`; returns the running logs of the epoch.
  Logs train_step(const data::Batch& batch);
  // Run train steps op by op instead of as a captured step (default false).
  void set_run_eagerly(bool eager) { run_eagerly_ = eager; }
  bool run_eagerly() const { return run_eagerly_; }
  // Accumulates the loss and metrics of `batch` without training; returns the running logs.
  Logs test_step(const data::Batch& batch);

  void reset_metrics();
  // "loss" and every metric's result.
  Logs metric_results() const;

  Model& model() { return model_; }
  Optimizer& optimizer() { return optimizer_; }
  const std::vector<std::unique_ptr<Metric>>& metrics() const { return metrics_; }
  TrainingCounters& counters() { return counters_; }
  const FitParams& params() const { return params_; }
  // Keras's model.stop_training: set by a callback to end fit after the current batch.
  bool stop_training() const { return counters_.stop_training != 0; }
  void set_stop_training(bool stop) { counters_.stop_training = stop ? 1 : 0; }
  // The training dataset of the fit in progress (nullptr outside fit).
  data::Dataset* train_data() const { return train_data_; }

  // The training state besides variables, optimizer and dataset: counters ("trainer/..."), loss
  // and metric accumulators ("metrics/<name>/..."), and the state of the fit's callbacks
  // ("callbacks/<k>/..." for the k-th callback of FitOptions::callbacks that has any).
  StateRefs state_refs();

 private:
  class CallbackList;
  void track(const DTensor& loss, const data::Batch& batch, const DTensor& predictions);
  // Forward, gradient and update on (features, labels); returns {mean loss, predictions}.
  std::vector<DTensor> optimize(const DTensor& features, const DTensor& labels);
  Logs run_evaluation(data::Dataset& data, int64_t steps, CallbackList& callbacks);

  Model& model_;
  Optimizer& optimizer_;
  Loss loss_;
  Mean loss_tracker_{"loss"};
  std::vector<std::unique_ptr<Metric>> metrics_;
  TrainingCounters counters_;
  FitParams params_;
  data::Dataset* train_data_ = nullptr;
  std::vector<Callback*> fit_callbacks_;
  bool run_eagerly_ = false;
  Function captured_step_;  // optimize(), captured
};

// A metrics list from metric types with default constructors:
// metrics_list<SparseCategoricalAccuracy>().
template <typename... Ms>
std::vector<std::unique_ptr<Metric>> metrics_list() {
  std::vector<std::unique_ptr<Metric>> out;
  (out.push_back(std::make_unique<Ms>()), ...);
  return out;
}

}  // namespace dtensor::keras
