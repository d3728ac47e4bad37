// Checkpoint callbacks: ModelCheckpoint saves the whole training state during fit, and
// BackupAndRestore also restores it when fit starts, so that a run that was killed continues
// where its last checkpoint left it (tf.keras.callbacks.ModelCheckpoint and BackupAndRestore).
//
// The training state (trainer.h) is saved through dtensor::Checkpoint into
// <directory>/ckpt-<global step> by a CheckpointManager that keeps the newest `max_to_keep`:
//   model/<variable name>          the model's variables
//   optimizer                      its step and slots (built for the model's variables)
//   train_data                     the training dataset's position
//   trainer/..., metrics/...       counters and accumulators (integers; doubles as their bits)
//   callbacks/<k>/...              what the k-th callback with state tracks (in FitOptions order)
// A fit that restores this state continues at the saved epoch and batch and produces the same
// bits as an uninterrupted fit, provided it is set up the same way: the same model, optimizer,
// loss and metrics, the same data pipeline (examples, shuffle seed, batch size, repeat), and the
// same callbacks with state in the same order (restore is strict: every saved entry must be
// tracked, and everything tracked saved). Callbacks without state (ProgressBar, LambdaCallback,
// the checkpoint callbacks themselves) may differ between the runs.
//
// Saving is collective over the processes of the model's mesh, and atomic: a crash during a save
// leaves the previous checkpoint as the latest. Saves happen in on_train_batch_end (every n steps)
// or on_epoch_end (every epoch), and in on_train_end when the final state is not saved yet; these
// callbacks save the training state, so they run after the other callbacks in those hooks
// (callbacks.h).
//
// Not thread-safe. The callbacks must outlive the fits that use them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/keras/callbacks.h"

namespace dtensor {
class Checkpoint;
class CheckpointManager;
}  // namespace dtensor

namespace dtensor::keras {

// When a checkpoint callback saves: at the end of every epoch, or after every n-th training
// batch (counted over the whole run: the trainer's global step).
class SaveFreq {
 public:
  static SaveFreq epoch() { return SaveFreq(0); }
  // InvalidArgumentError unless n >= 1.
  static SaveFreq steps(int64_t n);

  bool every_epoch() const { return steps_ == 0; }
  int64_t every_steps() const { return steps_; }

 private:
  explicit SaveFreq(int64_t steps) : steps_(steps) {}
  int64_t steps_;
};

class ModelCheckpoint : public Callback {
 public:
  // InvalidArgumentError for an empty directory or max_to_keep < 1.
  explicit ModelCheckpoint(std::string directory, SaveFreq save_freq = SaveFreq::epoch(),
                           int64_t max_to_keep = 5);
  ~ModelCheckpoint() override;

  const std::string& directory() const { return directory_; }
  // The path of the last checkpoint this callback saved, if any.
  const std::optional<std::string>& last_saved() const { return last_saved_; }

  void on_train_begin(const Logs& logs) override;
  void restore_training_state() override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int64_t epoch, const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  bool saves_training_state() const override { return true; }

 protected:
  // Restores the newest checkpoint of the directory into the training state; returns its step.
  std::optional<int64_t> restore_latest();
  CheckpointManager& manager();
  // Drops the checkpoint and its manager (they refer to the fit's objects).
  void release();

 private:
  void save();

  std::string directory_;
  SaveFreq save_freq_;
  int64_t max_to_keep_;
  std::optional<std::string> last_saved_;
  int64_t last_saved_step_ = -1;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::unique_ptr<CheckpointManager> manager_;
  // Doubles of the training state, saved as their bit patterns.
  std::vector<double*> doubles_;
  std::vector<int64_t> double_bits_;
};

// ModelCheckpoint that restores the newest checkpoint of its directory when fit starts (after
// every callback's on_train_begin, before the first batch). With delete_checkpoint (Keras's
// default) the checkpoints are deleted when fit returns normally (and the final state is not
// saved), so the next run starts afresh; without it they stay, and running the finished job again
// restores its final state and trains no more.
class BackupAndRestore : public ModelCheckpoint {
 public:
  explicit BackupAndRestore(std::string directory, SaveFreq save_freq = SaveFreq::epoch(),
                            int64_t max_to_keep = 1, bool delete_checkpoint = true);

  // The global step of the checkpoint the last fit restored, if it restored one.
  const std::optional<int64_t>& restored_step() const { return restored_step_; }

  void restore_training_state() override;
  void on_train_end(const Logs& logs) override;

 private:
  bool delete_checkpoint_;
  std::optional<int64_t> restored_step_;
};

}  // namespace dtensor::keras
