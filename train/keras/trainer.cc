#include "train/keras/trainer.h"

#include <iostream>
#include <set>

#include "dtensor/host_copy.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "runtime/error.h"
#include "runtime/process.h"

namespace dtensor::keras {

// The callbacks of one fit or evaluate, dispatched in the documented order.
class Trainer::CallbackList {
 public:
  explicit CallbackList(std::vector<Callback*> callbacks) : all_(std::move(callbacks)) {
    for (Callback* c : all_) (c->saves_training_state() ? savers_ : others_).push_back(c);
    savers_last_ = others_;
    savers_last_.insert(savers_last_.end(), savers_.begin(), savers_.end());
  }

  void train_begin(const Logs& logs) {
    for (Callback* c : all_) c->on_train_begin(logs);
  }
  void restore() {
    for (Callback* c : all_) c->restore_training_state();
  }
  void train_end(const Logs& logs) {
    for (Callback* c : savers_last_) c->on_train_end(logs);
  }
  void epoch_begin(int64_t epoch, const Logs& logs) {
    for (Callback* c : all_) c->on_epoch_begin(epoch, logs);
  }
  void epoch_end(int64_t epoch, const Logs& logs) {
    for (Callback* c : savers_last_) c->on_epoch_end(epoch, logs);
  }
  void batch_begin(int64_t batch, const Logs& logs) {
    for (Callback* c : all_) c->on_train_batch_begin(batch, logs);
  }
  void batch_end(int64_t batch, const Logs& logs) {
    for (Callback* c : savers_last_) c->on_train_batch_end(batch, logs);
  }
  void test_begin(const Logs& logs) {
    for (Callback* c : all_) c->on_test_begin(logs);
  }
  void test_end(const Logs& logs) {
    for (Callback* c : all_) c->on_test_end(logs);
  }
  void test_batch_end(int64_t batch, const Logs& logs) {
    for (Callback* c : all_) c->on_test_batch_end(batch, logs);
  }

 private:
  std::vector<Callback*> all_, savers_, others_, savers_last_;
};

Trainer& Callback::trainer() const {
  if (trainer_ == nullptr) {
    throw_error<InvalidArgumentError>("Callback::trainer",
                                      "the callback has not been given to fit or evaluate");
  }
  return *trainer_;
}

Trainer::Trainer(Model& model, Optimizer& optimizer, Loss loss,
                 std::vector<std::unique_ptr<Metric>> metrics)
    : model_(model),
      optimizer_(optimizer),
      loss_(std::move(loss)),
      metrics_(std::move(metrics)),
      captured_step_(function(
          [this](const std::vector<DTensor>& batch) { return optimize(batch[0], batch[1]); })) {
  const char* fn = "Trainer";
  if (!loss_) throw_error<InvalidArgumentError>(fn, "no loss function");
  std::set<std::string> names{"loss"};
  for (const auto& m : metrics_) {
    if (!m) throw_error<InvalidArgumentError>(fn, "a metric is null");
    if (!names.insert(m->name()).second) {
      throw_error<InvalidArgumentError>(fn, "metric name '{}' is used twice (\"loss\" is taken)",
                                        m->name());
    }
  }
}

DTensor Trainer::predict(const DTensor& inputs) { return model_.call(inputs, false); }

std::vector<DTensor> Trainer::optimize(const DTensor& features, const DTensor& labels) {
  const std::vector<DVariable> vars = model_.variables();
  std::optional<DTensor> predictions, loss;
  std::vector<DTensor> grads;
  {
    GradientTape tape;
    for (const DVariable& v : vars) tape.watch(v);
    predictions = model_.call(features, true);
    // The mean over the global batch: its gradient is the data-parallel average.
    loss = reduce_mean(loss_(labels, *predictions));
    grads = tape.gradient(*loss, vars);
  }
  optimizer_.apply(vars, grads);
  return {*loss, *predictions};
}

Logs Trainer::train_step(const data::Batch& batch) {
  std::vector<DTensor> out = run_eagerly_ ? optimize(batch.features, batch.labels)
                                          : captured_step_({batch.features, batch.labels});
  track(out[0], batch, out[1]);
  return metric_results();
}

Logs Trainer::test_step(const data::Batch& batch) {
  DTensor predictions = model_.call(batch.features, false);
  track(reduce_mean(loss_(batch.labels, predictions)), batch, predictions);
  return metric_results();
}

void Trainer::track(const DTensor& loss, const data::Batch& batch, const DTensor& predictions) {
  DTensor loss64 = loss.dtype() == DType::kF64 ? loss : cast(loss, DType::kF64);
  // Keras weights each batch's mean loss by its size: the epoch value is the mean per example.
  loss_tracker_.update_state(host_readable(to_global(loss64)).data<double>()[0],
                             static_cast<double>(batch.size));
  for (const auto& m : metrics_) m->update(batch.labels, predictions);
}

void Trainer::reset_metrics() {
  loss_tracker_.reset();
  for (const auto& m : metrics_) m->reset();
}

Logs Trainer::metric_results() const {
  Logs logs{{"loss", loss_tracker_.result()}};
  for (const auto& m : metrics_) logs[m->name()] = m->result();
  return logs;
}

StateRefs Trainer::state_refs() {
  StateRefs refs;
  refs.ints = {{"trainer/epoch", &counters_.epoch},
               {"trainer/step_in_epoch", &counters_.step_in_epoch},
               {"trainer/global_step", &counters_.global_step},
               {"trainer/stop_training", &counters_.stop_training}};
  loss_tracker_.track_state("metrics/loss/", refs);
  for (const auto& m : metrics_) m->track_state("metrics/" + m->name() + "/", refs);
  // Numbered among the callbacks that have state, so that adding or removing stateless ones
  // (progress, lambdas, checkpoint callbacks) does not rename anything.
  int64_t k = 0;
  for (Callback* c : fit_callbacks_) {
    StateRefs mine;
    c->track_state("callbacks/" + std::to_string(k) + "/", mine);
    if (mine.ints.empty() && mine.doubles.empty() && mine.variables.empty()) continue;
    ++k;
    refs.ints.insert(refs.ints.end(), mine.ints.begin(), mine.ints.end());
    refs.doubles.insert(refs.doubles.end(), mine.doubles.begin(), mine.doubles.end());
    refs.variables.insert(refs.variables.end(), mine.variables.begin(), mine.variables.end());
  }
  return refs;
}

namespace {

// Keeps the values of the metric accumulators and puts them back when it goes, even when an
// evaluation throws.
class MetricsGuard {
 public:
  explicit MetricsGuard(const StateRefs& refs) {
    for (const auto& [name, p] : refs.doubles) saved_.emplace_back(p, *p);
  }
  ~MetricsGuard() {
    for (const auto& [p, v] : saved_) *p = v;
  }
  MetricsGuard(const MetricsGuard&) = delete;
  MetricsGuard& operator=(const MetricsGuard&) = delete;

 private:
  std::vector<std::pair<double*, double>> saved_;
};

// The data and the model must come from one strategy: batches on the mesh of the variables.
void check_same_mesh(const Model& model, const data::Dataset& data, const char* what,
                     const char* fn) {
  const std::vector<DVariable> vars = model.variables();
  if (vars.empty() || vars.front().value().mesh() == data.mesh()) return;
  const auto [data_mesh, model_mesh] =
      distinct_mesh_strings(data.mesh(), vars.front().value().mesh());
  throw_error<MeshError>(fn,
                         "the {} is on mesh {}, the model's variables on mesh {}: build both "
                         "with one strategy (in its scope, and with its "
                         "experimental_distribute_dataset)",
                         what, data_mesh, model_mesh);
}

void check_callbacks(const std::vector<Callback*>& callbacks, const char* fn) {
  for (size_t i = 0; i < callbacks.size(); ++i) {
    if (callbacks[i] == nullptr) throw_error<InvalidArgumentError>(fn, "callback {} is null", i);
  }
}

}  // namespace

Logs Trainer::run_evaluation(data::Dataset& data, int64_t steps, CallbackList& callbacks) {
  const char* fn = "Trainer::evaluate";
  if (steps < 0) throw_error<InvalidArgumentError>(fn, "steps must be >= 0, got {}", steps);
  const int64_t n = steps > 0 ? steps : data.batches_per_epoch();
  if (n == 0) {
    throw_error<InvalidArgumentError>(
        fn, "the data has no batches ({} examples): call batch(global_batch_size) first",
        data.num_examples());
  }
  StateRefs refs;
  loss_tracker_.track_state("metrics/loss/", refs);
  for (const auto& m : metrics_) m->track_state("metrics/" + m->name() + "/", refs);
  MetricsGuard training_metrics(refs);
  reset_metrics();
  data.restore({0, 0});
  callbacks.test_begin({});
  Logs logs = metric_results();
  for (int64_t b = 0; b < n; ++b) {
    std::optional<data::Batch> batch = data.next();
    if (!batch) break;
    logs = test_step(*batch);
    callbacks.test_batch_end(b, logs);
  }
  callbacks.test_end(logs);
  return logs;
}

Logs Trainer::evaluate(data::Dataset& data, const EvaluateOptions& options) {
  check_callbacks(options.callbacks, "Trainer::evaluate");
  check_same_mesh(model_, data, "data", "Trainer::evaluate");
  for (Callback* c : options.callbacks) c->trainer_ = this;
  CallbackList callbacks(options.callbacks);
  return run_evaluation(data, options.steps, callbacks);
}

History Trainer::fit(data::Dataset& train, const FitOptions& options) {
  const char* fn = "Trainer::fit";
  if (options.epochs < 0 || options.initial_epoch < 0 || options.steps_per_epoch < 0 ||
      options.validation_steps < 0) {
    throw_error<InvalidArgumentError>(
        fn,
        "epochs ({}), initial_epoch ({}), steps_per_epoch ({}) and validation_steps ({}) must "
        "be >= 0",
        options.epochs, options.initial_epoch, options.steps_per_epoch, options.validation_steps);
  }
  if (options.validation_freq < 1) {
    throw_error<InvalidArgumentError>(fn, "validation_freq must be >= 1, got {}",
                                      options.validation_freq);
  }
  check_callbacks(options.callbacks, fn);
  check_same_mesh(model_, train, "training data", fn);
  if (options.validation_data != nullptr) {
    check_same_mesh(model_, *options.validation_data, "validation data", fn);
  }
  if (options.validation_data == &train) {
    throw_error<InvalidArgumentError>(
        fn,
        "validation_data is the training dataset: evaluation rewinds it; pass another Dataset "
        "over the validation examples");
  }
  const int64_t steps =
      options.steps_per_epoch > 0 ? options.steps_per_epoch : train.batches_per_epoch();
  if (steps == 0) {
    throw_error<InvalidArgumentError>(
        fn, "the training data has no batches ({} examples): call batch(global_batch_size) first",
        train.num_examples());
  }

  std::vector<Callback*> all = options.callbacks;
  std::unique_ptr<ProgressBar> progress;
  // Like every log line of a multi-process job, progress comes from process 0 unless asked for.
  const bool silent = options.verbose == Verbosity::kSilent ||
                      (options.verbose == Verbosity::kAuto && this_process().index != 0);
  if (!silent) {
    std::ostream& out = options.progress_output ? *options.progress_output : std::cout;
    ProgressBar::Mode mode = options.verbose == Verbosity::kProgressBar ? ProgressBar::Mode::kBar
                             : options.verbose == Verbosity::kEpochLines
                                 ? ProgressBar::Mode::kEpochLines
                                 : ProgressBar::Mode::kAuto;
    progress = std::make_unique<ProgressBar>(out, mode);
    all.insert(all.begin(), progress.get());
  }
  for (Callback* c : all) c->trainer_ = this;
  CallbackList callbacks(all);

  // Bound for the fit: the state the callbacks see.
  struct Binding {
    Trainer& t;
    ~Binding() {
      t.train_data_ = nullptr;
      t.fit_callbacks_.clear();
    }
  } binding{*this};
  train_data_ = &train;
  fit_callbacks_ = options.callbacks;
  params_ = {options.epochs, steps};
  counters_.epoch = options.initial_epoch;
  counters_.step_in_epoch = 0;
  counters_.stop_training = 0;

  callbacks.train_begin({});
  callbacks.restore();

  History history;
  Logs epoch_logs;
  bool out_of_data = false;
  while (!stop_training() && !out_of_data && counters_.epoch < options.epochs) {
    const int64_t epoch = counters_.epoch;
    if (counters_.step_in_epoch == 0) reset_metrics();
    callbacks.epoch_begin(epoch, {});
    while (counters_.step_in_epoch < steps && !stop_training()) {
      const int64_t b = counters_.step_in_epoch;
      callbacks.batch_begin(b, {});
      std::optional<data::Batch> batch = train.next();
      if (!batch) {
        std::cerr << "[Trainer::fit] warning: the training data ran out after " << b
                  << " batches of epoch " << epoch << " (of " << steps
                  << "); stopping. Configure repeat() so it yields epochs * steps_per_epoch "
                     "batches.\n";
        out_of_data = true;
        break;
      }
      Logs logs = train_step(*batch);
      ++counters_.step_in_epoch;
      ++counters_.global_step;
      callbacks.batch_end(b, logs);
    }
    if (counters_.step_in_epoch == 0) break;  // ran out before this epoch's first batch
    epoch_logs = metric_results();
    if (options.validation_data != nullptr && (epoch + 1) % options.validation_freq == 0) {
      Logs val = run_evaluation(*options.validation_data, options.validation_steps, callbacks);
      for (const auto& [name, value] : val) epoch_logs["val_" + name] = value;
    }
    counters_.epoch = epoch + 1;
    counters_.step_in_epoch = 0;
    callbacks.epoch_end(epoch, epoch_logs);
    history.epochs.push_back(epoch);
    for (const auto& [name, value] : epoch_logs) history.history[name].push_back(value);
  }
  callbacks.train_end(epoch_logs);
  return history;
}

}  // namespace dtensor::keras
