#include "train/keras/checkpoint_callbacks.h"

#include <cstring>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/process.h"
#include "train/checkpoint/checkpoint.h"
#include "train/keras/trainer.h"

namespace dtensor::keras {

SaveFreq SaveFreq::steps(int64_t n) {
  if (n < 1) throw_error<InvalidArgumentError>("SaveFreq::steps", "n must be >= 1, got {}", n);
  return SaveFreq(n);
}

ModelCheckpoint::ModelCheckpoint(std::string directory, SaveFreq save_freq, int64_t max_to_keep)
    : directory_(std::move(directory)), save_freq_(save_freq), max_to_keep_(max_to_keep) {
  const char* fn = "ModelCheckpoint";
  if (directory_.empty()) throw_error<InvalidArgumentError>(fn, "empty directory");
  if (max_to_keep_ < 1) {
    throw_error<InvalidArgumentError>(fn, "max_to_keep must be >= 1, got {}", max_to_keep_);
  }
}

ModelCheckpoint::~ModelCheckpoint() = default;

void ModelCheckpoint::on_train_begin(const Logs&) {
  release();
  last_saved_step_ = -1;
  doubles_.clear();
  double_bits_.clear();
}

void ModelCheckpoint::restore_training_state() {
  // Built here, after every on_train_begin: the callbacks' state exists by now.
  Trainer& trainer = this->trainer();
  auto checkpoint = std::make_unique<Checkpoint>();
  const std::vector<DVariable> vars = trainer.model().variables();
  checkpoint->add_variables("model", vars);
  checkpoint->add_optimizer("optimizer", trainer.optimizer(), vars);
  checkpoint->add_dataset("train_data", *trainer.train_data());
  StateRefs refs = trainer.state_refs();
  for (const auto& [name, value] : refs.ints) checkpoint->add_int(name, value);
  doubles_.clear();
  double_bits_.assign(refs.doubles.size(), 0);  // sized first: add_int keeps the addresses
  for (size_t i = 0; i < refs.doubles.size(); ++i) {
    doubles_.push_back(refs.doubles[i].second);
    checkpoint->add_int(refs.doubles[i].first, &double_bits_[i]);
  }
  for (const auto& [name, var] : refs.variables) checkpoint->add_variable(name, var);
  manager_ = std::make_unique<CheckpointManager>(*checkpoint, directory_, max_to_keep_);
  checkpoint_ = std::move(checkpoint);
}

CheckpointManager& ModelCheckpoint::manager() {
  if (!manager_) {
    throw_error<InvalidArgumentError>("ModelCheckpoint", "'{}' is not part of a fit in progress",
                                      directory_);
  }
  return *manager_;
}

std::optional<int64_t> ModelCheckpoint::restore_latest() {
  std::optional<int64_t> step = manager().restore_latest();
  if (step) {
    for (size_t i = 0; i < doubles_.size(); ++i) {
      std::memcpy(doubles_[i], &double_bits_[i], sizeof(double));
    }
  }
  return step;
}

void ModelCheckpoint::save() {
  for (size_t i = 0; i < doubles_.size(); ++i) {
    std::memcpy(&double_bits_[i], doubles_[i], sizeof(double));
  }
  last_saved_step_ = trainer().counters().global_step;
  last_saved_ = manager().save(last_saved_step_);
}

void ModelCheckpoint::on_train_batch_end(int64_t, const Logs&) {
  if (!save_freq_.every_epoch() &&
      trainer().counters().global_step % save_freq_.every_steps() == 0) {
    save();
  }
}

void ModelCheckpoint::on_epoch_end(int64_t, const Logs&) {
  if (save_freq_.every_epoch()) save();
}

void ModelCheckpoint::on_train_end(const Logs&) {
  // The final state, so that running a finished job again finds it complete.
  if (manager_ && last_saved_step_ != trainer().counters().global_step) save();
  release();
}

void ModelCheckpoint::release() {
  // The checkpoint refers to the fit's dataset: let go of it with the fit.
  manager_.reset();
  checkpoint_.reset();
}

BackupAndRestore::BackupAndRestore(std::string directory, SaveFreq save_freq, int64_t max_to_keep,
                                   bool delete_checkpoint)
    : ModelCheckpoint(std::move(directory), save_freq, max_to_keep),
      delete_checkpoint_(delete_checkpoint) {}

void BackupAndRestore::restore_training_state() {
  ModelCheckpoint::restore_training_state();
  restored_step_ = restore_latest();
}

void BackupAndRestore::on_train_end(const Logs& logs) {
  if (!delete_checkpoint_) {
    ModelCheckpoint::on_train_end(logs);
    return;
  }
  if (this_process().index == 0) {
    for (const std::string& path : manager().checkpoints()) std::filesystem::remove_all(path);
  }
  release();
}

}  // namespace dtensor::keras
