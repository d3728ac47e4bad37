// Callbacks: hooks into Trainer::fit and evaluate (tf.keras.callbacks), and the ready-made ones:
// EarlyStopping, MetricsLogger (CSV or JSON lines), ProgressBar and LambdaCallback. Checkpoint
// callbacks (ModelCheckpoint, BackupAndRestore) live in checkpoint_callbacks.h.
//
// Order of calls in fit, for the epochs e and batches b it runs:
//   on_train_begin; restore_training_state;
//   per epoch: on_epoch_begin(e); per batch: on_train_batch_begin(b), on_train_batch_end(b);
//              [validation: on_test_begin, on_test_batch_end..., on_test_end]; on_epoch_end(e)
//   on_train_end (only when fit returns normally, not when it throws).
// Callbacks are called in the order given, except that those whose saves_training_state() is
// true are called after the others in on_train_batch_end, on_epoch_end and on_train_end, so that
// the state they save includes what the others did in the same hook (EarlyStopping's counters or
// restored best weights, a log row).
//
// Logs map metric names to values: "loss", each metric's name, and "val_"-prefixed ones after
// validation. Batch logs hold the running epoch values so far; epoch logs hold the epoch's.
//
// Ownership: the trainer does not own callbacks; they must outlive the fit that uses them. A
// callback is bound to one trainer at a time. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "train/keras/metrics.h"

namespace dtensor::keras {

class Trainer;

using Logs = std::map<std::string, double>;

class Callback {
 public:
  Callback() = default;
  virtual ~Callback() = default;
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

  virtual void on_train_begin(const Logs& logs) {}
  virtual void on_train_end(const Logs& logs) {}
  virtual void on_epoch_begin(int64_t epoch, const Logs& logs) {}
  virtual void on_epoch_end(int64_t epoch, const Logs& logs) {}
  virtual void on_train_batch_begin(int64_t batch, const Logs& logs) {}
  virtual void on_train_batch_end(int64_t batch, const Logs& logs) {}
  virtual void on_test_begin(const Logs& logs) {}
  virtual void on_test_end(const Logs& logs) {}
  virtual void on_test_batch_end(int64_t batch, const Logs& logs) {}

  // Called once per fit after every callback's on_train_begin and before the first batch: where
  // a callback restores saved training state (BackupAndRestore).
  virtual void restore_training_state() {}
  // Adds the state this callback needs to continue an interrupted fit exactly, under `prefix`.
  virtual void track_state(const std::string& prefix, StateRefs& refs) {}
  // True for callbacks that save the training state (see the ordering rule above).
  virtual bool saves_training_state() const { return false; }

  // The trainer running this callback (InvalidArgumentError before it was given to fit or
  // evaluate).
  Trainer& trainer() const;

 private:
  friend class Trainer;
  Trainer* trainer_ = nullptr;
};

// A callback made of functions, for one-off hooks (tf.keras.callbacks.LambdaCallback).
class LambdaCallback : public Callback {
 public:
  std::function<void(const Logs&)> train_begin, train_end;
  std::function<void(int64_t, const Logs&)> epoch_begin, epoch_end, batch_begin, batch_end;

  void on_train_begin(const Logs& logs) override {
    if (train_begin) train_begin(logs);
  }
  void on_train_end(const Logs& logs) override {
    if (train_end) train_end(logs);
  }
  void on_epoch_begin(int64_t epoch, const Logs& logs) override {
    if (epoch_begin) epoch_begin(epoch, logs);
  }
  void on_epoch_end(int64_t epoch, const Logs& logs) override {
    if (epoch_end) epoch_end(epoch, logs);
  }
  void on_train_batch_begin(int64_t batch, const Logs& logs) override {
    if (batch_begin) batch_begin(batch, logs);
  }
  void on_train_batch_end(int64_t batch, const Logs& logs) override {
    if (batch_end) batch_end(batch, logs);
  }
};

// Stops training when a monitored value has stopped improving (tf.keras.callbacks.EarlyStopping,
// Keras 3 semantics). At each epoch end from `start_from_epoch` on: the value improves when it
// beats the best by more than min_delta (below it in min mode, above in max mode); an
// improvement resets the wait (unless a baseline is set and not beaten), otherwise the wait
// grows, and once it reaches `patience` (after the first epoch) training stops. With
// restore_best_weights the model gets the weights of the best epoch back at train end.
class EarlyStopping : public Callback {
 public:
  enum class Mode { kAuto, kMin, kMax };  // kAuto: max for names with "acc", else min
  struct Options {
    std::string monitor = "val_loss";
    double min_delta = 0;
    int64_t patience = 0;
    Mode mode = Mode::kAuto;
    std::optional<double> baseline;
    bool restore_best_weights = false;
    int64_t start_from_epoch = 0;
  };
  // InvalidArgumentError for a negative patience or start_from_epoch, or an empty monitor.
  explicit EarlyStopping(Options options);

  // The epoch at which it stopped training, or -1.
  int64_t stopped_epoch() const { return stopped_epoch_; }
  // The best value and its epoch (-1 before any).
  double best() const { return best_; }
  int64_t best_epoch() const { return best_epoch_; }

  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  void track_state(const std::string& prefix, StateRefs& refs) override;

 private:
  bool improves(double value, double reference) const;

  Options options_;
  bool maximize_ = false;
  int64_t wait_ = 0;
  double best_ = 0;
  int64_t best_epoch_ = -1;
  int64_t stopped_epoch_ = -1;
  int64_t has_best_weights_ = 0;
  std::vector<DVariable> best_weights_;
};

// Appends one row per epoch to a file (tf.keras.callbacks.CSVLogger): "epoch" (0-based) and the
// epoch logs. CSV: a header line of the sorted log names of the first row (later rows write
// those columns, empty when missing, and drop names not in it; when appending to a file that has
// a header, its columns are used); JSON lines: one object per epoch. Numbers are written in the
// shortest form that reads back to the same double. The file is flushed after every row; with
// several processes, only process 0 of the model's mesh writes.
//
// Resuming: the logger saves the file's length with the training state, and a restored fit
// truncates the file back to it before writing, so rows of epochs that are run again are not
// duplicated.
class MetricsLogger : public Callback {
 public:
  enum class Format { kAuto, kCsv, kJsonLines };  // kAuto: CSV for a ".csv" path, else JSON lines
  // append: keep an existing file's rows (otherwise a fit that restored nothing starts it anew).
  explicit MetricsLogger(std::string path, Format format = Format::kAuto, bool append = false);

  void on_train_begin(const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void track_state(const std::string& prefix, StateRefs& refs) override;

  // Called with each epoch's row before it is written: adds fields the logs lack (wall time,
  // examples/s, learning rate, step). Fields of the first row fix a CSV file's columns.
  std::function<void(int64_t epoch, Logs& row)> add_fields;

 private:
  std::string path_;
  Format format_;
  bool append_;
  int64_t length_ = -1;  // the file's length after the last row; -1 until the first row
  std::vector<std::string> columns_;
};

// Prints progress (tf.keras's verbose=1 and verbose=2 output). kBar redraws one line per batch
// ("12/40 [=======>......] - 0s 8ms/step - loss: 0.3412 - accuracy: 0.9012") and ends it with
// the epoch logs; kEpochLines prints one line per epoch. kAuto picks kBar when `out` is std::cout
// or std::cerr and that stream is a terminal, else kEpochLines.
class ProgressBar : public Callback {
 public:
  enum class Mode { kAuto, kBar, kEpochLines };
  explicit ProgressBar(std::ostream& out, Mode mode = Mode::kAuto);

  void on_train_begin(const Logs& logs) override;
  void on_epoch_begin(int64_t epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;

 private:
  std::ostream& out_;
  Mode mode_;
  bool bar_ = false;
  int64_t steps_done_ = 0;
  int64_t first_step_ = 0;  // steps of the epoch done before it began here (restored)
  double epoch_start_ = 0;
};

// "loss: 0.3412 - accuracy: 0.9012": logs as Keras prints them.
std::string format_logs(const Logs& logs);

}  // namespace dtensor::keras
