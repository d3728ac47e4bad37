// Resumable fit: a run interrupted (by an exception, after k steps) and resumed from its
// checkpoint directory by a fresh trainer ends with the same bits as an uninterrupted run:
// weights, optimizer step, epoch logs and the metrics log file. Plus saving frequency, keep-last-K,
// delete_checkpoint and a mismatched resume.
#include "train/keras/checkpoint_callbacks.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "train/checkpoint/checkpoint.h"
#include "train/keras/test_problem.h"

using namespace dtensor;
using namespace dtensor::keras;
using namespace dtensor::keras::testing;
using Catch::Message;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(tmp ? tmp : "/tmp") / "checkpoint_callbacks_test" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Crash : std::runtime_error {
  Crash() : std::runtime_error("simulated crash") {}
};

// How a run is set up: everything but the crash is the same in every run of a scenario.
struct Scenario {
  SaveFreq save_freq = SaveFreq::epoch();
  int64_t epochs = 3;
  bool prefetch = false;
  bool early_stopping = true;
};

struct Outcome {
  std::vector<Tensor> weights;
  int64_t optimizer_step = 0;
  History history;  // of the last fit
  std::string log;  // the metrics file
  std::optional<int64_t> restored_step;
};

// One process lifetime: fresh objects, fit with BackupAndRestore in `dir`; throws Crash when the
// global step reaches crash_at (0: never).
Outcome run(const Scenario& s, const std::string& dir, int64_t crash_at) {
  Problem p;
  if (s.prefetch) p.train.prefetch(2);
  BackupAndRestore backup(dir + "/ckpt", s.save_freq, 2, /*delete_checkpoint=*/false);
  EarlyStopping::Options es_options;
  es_options.monitor = "val_loss";
  es_options.patience = 100;  // never stops, but keeps state (and best weights) to resume
  es_options.restore_best_weights = false;
  EarlyStopping early_stopping(es_options);
  MetricsLogger logger(dir + "/log.csv");
  LambdaCallback crash;
  crash.batch_end = [&](int64_t, const Logs&) {
    if (crash.trainer().counters().global_step == crash_at) throw Crash();
  };
  FitOptions options = quiet(s.epochs);
  options.validation_data = &p.test;
  options.callbacks = {&crash, &backup, &logger};
  if (s.early_stopping) options.callbacks.push_back(&early_stopping);
  Outcome out;
  out.history = p.trainer.fit(p.train, options);
  out.weights = p.weights();
  out.optimizer_step = p.optimizer.step();
  out.log = read_file(dir + "/log.csv");
  out.restored_step = backup.restored_step();
  return out;
}

// Runs uninterrupted, then crashed at each of `crashes` in turn and resumed, and compares.
void check_resume(const Scenario& s, const std::vector<int64_t>& crashes, const std::string& name) {
  Outcome reference = run(s, fresh_dir(name + "_reference"), 0);
  const std::string dir = fresh_dir(name);
  for (int64_t at : crashes) {
    INFO("crash at step " << at);
    CHECK_THROWS_AS(run(s, dir, at), Crash);
  }
  Outcome resumed = run(s, dir, 0);
  CHECK(same_bits(resumed.weights, reference.weights));
  CHECK(resumed.optimizer_step == reference.optimizer_step);
  CHECK(resumed.log == reference.log);
  // The resumed fit's epochs have exactly the reference's logs.
  const auto& epochs = resumed.history.epochs;
  for (size_t i = 0; i < epochs.size(); ++i) {
    const size_t e = static_cast<size_t>(epochs[i]);
    for (const auto& [key, values] : resumed.history.history) {
      INFO("epoch " << e << " " << key);
      CHECK(values[i] == reference.history.history.at(key)[e]);
    }
  }
}

}  // namespace

TEST_CASE("a crashed fit resumed from checkpoints every n steps ends with identical bits") {
  Scenario s;
  s.save_freq = SaveFreq::steps(4);
  // Crash at 7 (restores step 4, mid-epoch 0; the epoch-0 log row written at step 6 is dropped),
  // at 13 (restores 12: the end of epoch 1 exactly, before its validation), then finish.
  check_resume(s, {7, 13}, "steps");
}

TEST_CASE("a crashed fit resumed from checkpoints every epoch ends with identical bits") {
  Scenario s;
  s.prefetch = true;
  check_resume(s, {9, 16}, "epochs");
}

TEST_CASE("a crash before the first checkpoint restores nothing and starts over") {
  Scenario s;
  s.save_freq = SaveFreq::steps(5);
  s.epochs = 2;
  check_resume(s, {3}, "early");
}

TEST_CASE("a crash right after a save resumes from that save") {
  Scenario s;
  s.save_freq = SaveFreq::steps(1);
  s.epochs = 2;
  s.early_stopping = false;
  check_resume(s, {5, 9, 10}, "every_step");
}

TEST_CASE("BackupAndRestore restores the latest checkpoint and reports its step") {
  const std::string dir = fresh_dir("report");
  Scenario s;
  s.save_freq = SaveFreq::steps(4);
  CHECK_THROWS_AS(run(s, dir, 11), Crash);
  Outcome resumed = run(s, dir, 0);
  CHECK(resumed.restored_step == std::optional<int64_t>(8));
  CHECK(resumed.history.epochs == std::vector<int64_t>{1, 2});
  // Kept (delete_checkpoint false): running the finished job again trains no more.
  Outcome again = run(s, dir, 0);
  CHECK(again.restored_step == std::optional<int64_t>(18));  // saved at train end
  CHECK(again.history.epochs.empty());
  CHECK(same_bits(again.weights, resumed.weights));
}

TEST_CASE("ModelCheckpoint keeps the newest max_to_keep checkpoints") {
  const std::string dir = fresh_dir("keep");
  Problem p;
  ModelCheckpoint checkpoint(dir, SaveFreq::steps(2), 3);
  FitOptions options = quiet(3);
  options.callbacks = {&checkpoint};
  p.trainer.fit(p.train, options);
  Checkpoint empty;
  CheckpointManager manager(empty, dir, 3);
  CHECK(manager.checkpoints() ==
        std::vector<std::string>{dir + "/ckpt-14", dir + "/ckpt-16", dir + "/ckpt-18"});
  CHECK(checkpoint.last_saved() == std::optional<std::string>(dir + "/ckpt-18"));

  // The saved weights are the model's at that step.
  for (const DVariable& v : p.model.variables()) {
    DTensor saved = load_variable(dir + "/ckpt-18", "model/" + v.name(), v.layout());
    CHECK(bitwise_equal(to_global(saved), to_global(v.value())));
  }

  SECTION("every epoch") {
    const std::string epochs_dir = fresh_dir("keep_epochs");
    ModelCheckpoint per_epoch(epochs_dir, SaveFreq::epoch(), 5);
    options.callbacks = {&per_epoch};
    p.train.restore({0, 0});
    p.trainer.fit(p.train, options);  // global steps continue: 24, 30, 36
    CheckpointManager m(empty, epochs_dir, 5);
    CHECK(m.checkpoints() == std::vector<std::string>{epochs_dir + "/ckpt-24",
                                                      epochs_dir + "/ckpt-30",
                                                      epochs_dir + "/ckpt-36"});
  }
}

TEST_CASE("BackupAndRestore deletes its checkpoints after a complete fit by default") {
  const std::string dir = fresh_dir("delete");
  Problem p;
  BackupAndRestore backup(dir, SaveFreq::epoch());
  LambdaCallback probe;
  int64_t seen = 0;
  probe.epoch_end = [&](int64_t, const Logs&) { ++seen; };
  FitOptions options = quiet(2);
  options.callbacks = {&probe, &backup};
  p.trainer.fit(p.train, options);
  CHECK(seen == 2);
  CHECK(backup.last_saved() == std::optional<std::string>(dir + "/ckpt-12"));
  CHECK_FALSE(fs::exists(dir + "/ckpt-12"));
  CHECK_FALSE(fs::exists(dir + "/ckpt-6"));
}

TEST_CASE("resuming with other stateful callbacks is rejected") {
  const std::string dir = fresh_dir("mismatch");
  Scenario s;
  s.save_freq = SaveFreq::steps(3);
  CHECK_THROWS_AS(run(s, dir, 4), Crash);
  s.early_stopping = false;  // the checkpoint has EarlyStopping's state; this run tracks none
  CHECK_THROWS_AS(run(s, dir, 0), InvalidArgumentError);
}

TEST_CASE("checkpoint callback errors") {
  CHECK_THROWS_MATCHES(SaveFreq::steps(0), InvalidArgumentError,
                       Message("[SaveFreq::steps] n must be >= 1, got 0"));
  CHECK_THROWS_MATCHES(ModelCheckpoint(""), InvalidArgumentError,
                       Message("[ModelCheckpoint] empty directory"));
  CHECK_THROWS_MATCHES(ModelCheckpoint("d", SaveFreq::epoch(), 0), InvalidArgumentError,
                       Message("[ModelCheckpoint] max_to_keep must be >= 1, got 0"));
}
