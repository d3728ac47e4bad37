// Trainer: fit against a hand-written loop, evaluate, the callback protocol, data running out,
// stop_training, EarlyStopping, MetricsLogger, ProgressBar, losses, metrics and errors.
#include "train/keras/trainer.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/data/idx.h"
#include "train/keras/layers.h"
#include "train/keras/strategy.h"
#include "train/keras/test_problem.h"

using namespace dtensor;
using namespace dtensor::keras;
using Catch::Message;
using namespace dtensor::keras::testing;

namespace {

// Records every hook as text.
class Recorder : public Callback {
 public:
  explicit Recorder(std::vector<std::string>& events, std::string tag = "", bool saver = false)
      : events_(events), tag_(std::move(tag)), saver_(saver) {}
  void on_train_begin(const Logs&) override { add("train_begin"); }
  void on_train_end(const Logs&) override { add("train_end"); }
  void on_epoch_begin(int64_t e, const Logs&) override { add("epoch_begin " + std::to_string(e)); }
  void on_epoch_end(int64_t e, const Logs&) override { add("epoch_end " + std::to_string(e)); }
  void on_train_batch_begin(int64_t b, const Logs&) override {
    add("batch_begin " + std::to_string(b));
  }
  void on_train_batch_end(int64_t b, const Logs&) override {
    add("batch_end " + std::to_string(b));
  }
  void on_test_begin(const Logs&) override { add("test_begin"); }
  void on_test_end(const Logs&) override { add("test_end"); }
  void on_test_batch_end(int64_t b, const Logs&) override {
    add("test_batch " + std::to_string(b));
  }
  void restore_training_state() override { add("restore"); }
  bool saves_training_state() const override { return saver_; }

 private:
  void add(const std::string& e) { events_.push_back(tag_ + e); }
  std::vector<std::string>& events_;
  std::string tag_;
  bool saver_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(dir ? dir : "/tmp") / name).string();
}

}  // namespace

TEST_CASE("fit is the plain training loop, with Keras's logs") {
  Problem fitted;
  FitOptions options = quiet(2);
  options.validation_data = &fitted.test;
  History history = fitted.trainer.fit(fitted.train, options);

  // The same steps by hand: mean loss over the global batch, tape, apply.
  Problem manual;
  std::vector<double> epoch_loss, epoch_acc;
  const std::vector<DVariable> vars = manual.model.variables();
  for (int64_t e = 0; e < 2; ++e) {
    double loss_sum = 0, correct = 0, seen = 0;
    for (int64_t b = 0; b < kExamples / kBatch; ++b) {
      data::Batch batch = *manual.train.next();
      GradientTape tape;
      for (const DVariable& v : vars) tape.watch(v);
      DTensor logits = manual.model.call(batch.features, true);
      DTensor loss = reduce_mean(sparse_softmax_cross_entropy(logits, batch.labels));
      manual.optimizer.apply(vars, tape.gradient(loss, vars));
      loss_sum += to_global(loss).data<float>()[0] * static_cast<double>(batch.size);
      DTensor hits = equal(cast(argmax(logits, -1), DType::kI32), batch.labels);
      correct += to_global(reduce_sum(cast(hits, DType::kF64))).data<double>()[0];
      seen += static_cast<double>(batch.size);
    }
    epoch_loss.push_back(loss_sum / seen);
    epoch_acc.push_back(correct / seen);
  }
  CHECK(same_bits(fitted.weights(), manual.weights()));
  CHECK(history.epochs == std::vector<int64_t>{0, 1});
  CHECK(history.history.at("loss") == epoch_loss);
  CHECK(history.history.at("accuracy") == epoch_acc);
  REQUIRE(history.history.at("val_loss").size() == 2);
  // Validation after the last epoch is evaluate() on the final weights.
  Logs eval = fitted.trainer.evaluate(fitted.test);
  CHECK(eval.at("loss") == history.history.at("val_loss")[1]);
  CHECK(eval.at("accuracy") == history.history.at("val_accuracy")[1]);
  CHECK(fitted.trainer.counters().epoch == 2);
  CHECK(fitted.trainer.counters().global_step == 12);
  CHECK(fitted.optimizer.step() == 12);
}

TEST_CASE("fit learns") {
  Problem p(2, 480);
  FitOptions options = quiet(4);
  options.validation_data = &p.test;
  History h = p.trainer.fit(p.train, options);
  CHECK(h.history.at("loss").back() < 0.5 * h.history.at("loss").front());
  CHECK(h.history.at("accuracy").back() > 0.8);
  CHECK(h.history.at("val_accuracy").back() > 0.6);
}

TEST_CASE("evaluate rewinds its data, honours steps and keeps the training metrics") {
  Problem p;
  p.trainer.train_step(*p.train.next());
  const Logs running = p.trainer.metric_results();
  Logs all = p.trainer.evaluate(p.test);
  Logs again = p.trainer.evaluate(p.test);
  CHECK(all == again);
  CHECK(p.trainer.metric_results() == running);
  Logs first = p.trainer.evaluate(p.test, EvaluateOptions{1, {}});
  p.test.restore({0, 0});
  data::Batch batch = *p.test.next();
  DTensor logits = p.trainer.predict(batch.features);
  CHECK(first.at("loss") == static_cast<double>(to_global(reduce_mean(sparse_softmax_cross_entropy(
                                                              logits, batch.labels)))
                                                    .data<float>()[0]));
  std::vector<std::string> events;
  Recorder rec(events);
  p.trainer.evaluate(p.test, EvaluateOptions{2, {&rec}});
  CHECK(events ==
        std::vector<std::string>{"test_begin", "test_batch 0", "test_batch 1", "test_end"});
}

TEST_CASE("callbacks are called in Keras's order, state savers last") {
  Problem p(2);
  std::vector<std::string> events;
  Recorder a(events, "a:"), saver(events, "s:", true), b(events, "b:");
  FitOptions options = quiet(2);
  options.steps_per_epoch = 2;
  options.validation_data = &p.test;
  options.validation_steps = 1;
  options.validation_freq = 2;
  options.callbacks = {&a, &saver, &b};
  p.trainer.fit(p.train, options);
  std::vector<std::string> expected;
  auto all = [&](const std::string& e) {
    for (std::string t : {"a:", "s:", "b:"}) expected.push_back(t + e);
  };
  auto savers_last = [&](const std::string& e) {
    for (std::string t : {"a:", "b:", "s:"}) expected.push_back(t + e);
  };
  all("train_begin");
  all("restore");
  for (int e = 0; e < 2; ++e) {
    all("epoch_begin " + std::to_string(e));
    for (int b = 0; b < 2; ++b) {
      all("batch_begin " + std::to_string(b));
      savers_last("batch_end " + std::to_string(b));
    }
    if (e == 1) {  // validation_freq 2
      all("test_begin");
      all("test_batch 0");
      all("test_end");
    }
    savers_last("epoch_end " + std::to_string(e));
  }
  savers_last("train_end");
  CHECK(events == expected);
}

TEST_CASE("epochs of steps_per_epoch batches continue through the data") {
  Problem p;
  FitOptions options = quiet(3);
  options.steps_per_epoch = 4;  // 12 batches: two data epochs of 6
  options.initial_epoch = 1;    // runs epochs 1 and 2
  History h = p.trainer.fit(p.train, options);
  CHECK(h.epochs == std::vector<int64_t>{1, 2});
  CHECK(p.train.state() == data::Dataset::State{1, 2});
}

TEST_CASE("training stops when the data runs out") {
  Problem p;
  p.train.repeat(1);  // 6 batches in all
  FitOptions options = quiet(5);
  options.steps_per_epoch = 4;
  History h = p.trainer.fit(p.train, options);
  // Epoch 0: 4 batches; epoch 1: 2, then the data ends; the epoch still ends.
  CHECK(h.epochs == std::vector<int64_t>{0, 1});
  CHECK(p.trainer.counters().global_step == 6);
}

TEST_CASE("stop_training from a batch callback ends fit after that batch") {
  Problem p;
  LambdaCallback stopper;
  std::vector<int64_t> epochs_ended;
  stopper.batch_end = [&](int64_t batch, const Logs&) {
    if (batch == 2) stopper.trainer().set_stop_training(true);
  };
  stopper.epoch_end = [&](int64_t e, const Logs&) { epochs_ended.push_back(e); };
  FitOptions options = quiet(4);
  options.callbacks = {&stopper};
  History h = p.trainer.fit(p.train, options);
  CHECK(p.trainer.counters().global_step == 3);
  CHECK(epochs_ended == std::vector<int64_t>{0});
  CHECK(h.epochs == std::vector<int64_t>{0});
  // A new fit starts afresh.
  stopper.batch_end = nullptr;
  options.epochs = 1;
  p.train.restore({0, 0});
  CHECK(p.trainer.fit(p.train, options).epochs == std::vector<int64_t>{0});
}

namespace {

// Drives EarlyStopping's epoch ends with scripted values, bound to a trainer through evaluate.
struct EarlyStoppingRun {
  EarlyStoppingRun(EarlyStopping::Options options, const std::string& monitor = "val_loss")
      : es(std::move(options)), monitor(monitor) {
    p.trainer.evaluate(p.test, EvaluateOptions{1, {&es}});
    es.on_train_begin({});
  }
  // Feeds values until the trainer is told to stop; returns the number of epochs run.
  int64_t feed(const std::vector<double>& values) {
    int64_t e = 0;
    for (; e < static_cast<int64_t>(values.size()) && !p.trainer.stop_training(); ++e) {
      es.on_epoch_end(e, {{monitor, values[static_cast<size_t>(e)]}});
    }
    return e;
  }
  Problem p{1};
  EarlyStopping es;
  std::string monitor;
};

EarlyStopping::Options monitor(const std::string& name, int64_t patience) {
  EarlyStopping::Options o;
  o.monitor = name;
  o.patience = patience;
  return o;
}

}  // namespace

TEST_CASE("EarlyStopping") {
  SECTION("patience counts epochs without improvement") {
    EarlyStoppingRun r(monitor("val_loss", 2));
    CHECK(r.feed({1.0, 0.8, 0.9, 0.85, 0.7, 0.6}) == 4);
    CHECK(r.es.stopped_epoch() == 3);
    CHECK(r.es.best() == 0.8);
    CHECK(r.es.best_epoch() == 1);
  }
  SECTION("patience 0 stops at the first epoch without improvement, not the first epoch") {
    EarlyStoppingRun r(monitor("val_loss", 0));
    CHECK(r.feed({1.0, 0.5, 0.5, 0.1}) == 3);
    CHECK(r.es.stopped_epoch() == 2);
  }
  SECTION("min_delta: smaller changes are not improvements") {
    auto o = monitor("loss", 1);
    o.min_delta = 0.1;
    EarlyStoppingRun r(o, "loss");
    CHECK(r.feed({1.0, 0.95, 0.85, 0.7}) == 2);
    CHECK(r.es.best() == 1.0);
  }
  SECTION("accuracy is maximised in auto mode") {
    EarlyStoppingRun r(monitor("val_accuracy", 1), "val_accuracy");
    CHECK(r.feed({0.5, 0.6, 0.7, 0.65, 0.6, 0.9}) == 4);
    CHECK(r.es.best() == 0.7);
  }
  SECTION("explicit max mode") {
    auto o = monitor("score", 0);
    o.mode = EarlyStopping::Mode::kMax;
    EarlyStoppingRun r(o, "score");
    CHECK(r.feed({1, 2, 1}) == 3);
  }
  SECTION("a baseline must be beaten for the wait to reset") {
    auto o = monitor("val_loss", 2);
    EarlyStoppingRun without(o);
    CHECK(without.feed({0.9, 0.8, 0.85, 0.84}) == 4);
    // Improvements that do not beat the baseline keep the wait growing (Keras 3).
    o.baseline = 0.5;
    EarlyStoppingRun r(o);
    CHECK(r.feed({0.9, 0.8, 0.85, 0.84}) == 3);
  }
  SECTION("start_from_epoch ignores the first epochs") {
    auto o = monitor("val_loss", 0);
    o.start_from_epoch = 2;
    EarlyStoppingRun r(o);
    CHECK(r.feed({1, 2, 3, 4, 5}) == 4);
    CHECK(r.es.best_epoch() == 2);
  }
  SECTION("a missing monitor changes nothing") {
    EarlyStoppingRun r(monitor("val_auc", 0));
    CHECK(r.feed({1, 2, 3}) == 3);
    CHECK(r.es.stopped_epoch() == -1);
  }
  SECTION("restore_best_weights puts back the weights of the best epoch at train end") {
    auto o = monitor("val_loss", 1);
    o.restore_best_weights = true;
    EarlyStoppingRun r(o);
    DVariable w = r.p.model.variables()[0];
    std::vector<double> values{3, 1, 2, 5};
    std::vector<DTensor> seen;
    for (int64_t e = 0; e < 4 && !r.p.trainer.stop_training(); ++e) {
      w.assign(fill(w.shape(), w.layout(), static_cast<double>(e)));
      seen.push_back(w.value());
      r.es.on_epoch_end(e, {{"val_loss", values[static_cast<size_t>(e)]}});
    }
    CHECK(r.es.stopped_epoch() == 2);
    r.es.on_train_end({});
    CHECK(bitwise_equal(to_global(w.value()), to_global(seen[1])));
  }
  SECTION("errors") {
    CHECK_THROWS_MATCHES(EarlyStopping(monitor("", 1)), InvalidArgumentError,
                         Message("[EarlyStopping] no value to monitor"));
    CHECK_THROWS_MATCHES(EarlyStopping(monitor("loss", -1)), InvalidArgumentError,
                         Message("[EarlyStopping] patience (-1) and start_from_epoch (0) must be "
                                 ">= 0"));
  }
}

TEST_CASE("EarlyStopping in fit") {
  Problem p;
  auto o = monitor("val_loss", 0);
  o.min_delta = 100;  // nothing improves by that much: stops after the second epoch
  EarlyStopping es(o);
  FitOptions options = quiet(10);
  options.validation_data = &p.test;
  options.callbacks = {&es};
  History h = p.trainer.fit(p.train, options);
  CHECK(h.epochs == std::vector<int64_t>{0, 1});
  CHECK(es.stopped_epoch() == 1);
}

TEST_CASE("MetricsLogger writes exact rows, CSV or JSON lines") {
  const std::string csv = temp_path("metrics.csv"), jsonl = temp_path("metrics.jsonl");
  {
    std::ofstream old(csv);
    old << "stale\n";
  }
  Problem p;
  MetricsLogger to_csv(csv), to_json(jsonl);
  FitOptions options = quiet(2);
  options.validation_data = &p.test;
  options.callbacks = {&to_csv, &to_json};
  History h = p.trainer.fit(p.train, options);

  std::istringstream rows(read_file(csv));
  std::string line;
  std::getline(rows, line);
  CHECK(line == "epoch,accuracy,loss,val_accuracy,val_loss");
  for (int64_t e = 0; e < 2; ++e) {
    REQUIRE(std::getline(rows, line));
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    REQUIRE(cells.size() == 5);
    CHECK(cells[0] == std::to_string(e));
    // Shortest round-trip text: reads back to the very same double.
    CHECK(std::strtod(cells[2].c_str(), nullptr) == h.history.at("loss")[e]);
    CHECK(std::strtod(cells[4].c_str(), nullptr) == h.history.at("val_loss")[e]);
  }
  CHECK_FALSE(std::getline(rows, line));

  std::istringstream json(read_file(jsonl));
  REQUIRE(std::getline(json, line));
  CHECK(line.rfind("{\"epoch\":0,\"accuracy\":", 0) == 0);
  CHECK(line.find(",\"loss\":" + fmt::format("{}", h.history.at("loss")[0]) + ",") !=
        std::string::npos);
  REQUIRE(std::getline(json, line));
  CHECK(line.rfind("{\"epoch\":1,", 0) == 0);

  SECTION("append keeps the rows already there") {
    MetricsLogger appending(csv, MetricsLogger::Format::kAuto, true);
    options.epochs = 1;
    options.callbacks = {&appending};
    p.trainer.fit(p.train, options);
    std::istringstream all(read_file(csv));
    int lines = 0;
    for (std::string l; std::getline(all, l);) ++lines;
    CHECK(lines == 4);  // header, epochs 0 and 1, then epoch 0 of the new fit
  }
}

TEST_CASE("ProgressBar") {
  CHECK(format_logs(
            {{"val_loss", 0.5}, {"accuracy", 0.25}, {"loss", 1.0}, {"val_accuracy", 0.125}}) ==
        "loss: 1.0000 - accuracy: 0.2500 - val_loss: 0.5000 - val_accuracy: 0.1250");
  CHECK(format_logs({{"loss", 0.00012345}}) == "loss: 1.2345e-04");

  Problem p;
  std::ostringstream lines_out, bar_out;
  ProgressBar bar(bar_out, ProgressBar::Mode::kBar);
  FitOptions options = quiet(2);
  options.callbacks = {&bar};
  options.verbose = Verbosity::kEpochLines;
  options.progress_output = &lines_out;
  History h = p.trainer.fit(p.train, options);

  std::istringstream lines(lines_out.str());
  std::string line;
  for (int e = 1; e <= 2; ++e) {
    REQUIRE(std::getline(lines, line));
    CHECK(line.rfind("Epoch " + std::to_string(e) + "/2 - 6 steps - ", 0) == 0);
    CHECK(line.find("s - loss: " + fmt::format("{:.4f}", h.history.at("loss")[e - 1]) +
                    " - accuracy: ") != std::string::npos);
  }
  CHECK_FALSE(std::getline(lines, line));

  const std::string b = bar_out.str();
  CHECK(b.rfind("Epoch 1/2\n\r1/6 [====>", 0) == 0);
  CHECK(b.find("\r6/6 [==============================] - ") != std::string::npos);
  CHECK(b.find("Epoch 2/2\n") != std::string::npos);
  CHECK(b.back() == '\n');
}

TEST_CASE("losses and metrics") {
  MirroredStrategy s(2);
  Tensor logits_t = Tensor::empty({4, 3}, DType::kF32);
  const float v[] = {2, 1, 0, 0, 3, 1, 1, 1, 5, 0, 0, 0};
  std::copy(v, v + 12, logits_t.data<float>());
  Tensor labels_t = Tensor::empty({4}, DType::kI32);
  const int32_t l[] = {0, 2, 2, 1};
  std::copy(l, l + 4, labels_t.data<int32_t>());
  DTensor logits = distribute(logits_t, s.batch_layout(2));
  DTensor labels = distribute(labels_t, s.batch_layout(1));

  SparseCategoricalAccuracy acc;
  acc.update(labels, logits);  // right, wrong, right, wrong (ties pick the first)
  CHECK(acc.result() == 0.5);
  CHECK(acc.name() == "accuracy");
  acc.update(labels, logits);
  CHECK(acc.result() == 0.5);
  acc.reset();
  CHECK(acc.result() == 0.0);

  Tensor from_logits = to_global(sparse_categorical_crossentropy(true)(labels, logits));
  Tensor from_probs =
      to_global(sparse_categorical_crossentropy(false)(labels, softmax(logits, -1)));
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(from_probs.data<float>()[i] == Approx(from_logits.data<float>()[i]).epsilon(1e-5));
  }
  SparseCategoricalCrossentropy xent;
  xent.update(labels, logits);
  double mean = 0;
  for (int64_t i = 0; i < 4; ++i) mean += from_logits.data<float>()[i] / 4.0;
  CHECK(xent.result() == Approx(mean).epsilon(1e-12));

  Mean m("m");
  m.update_state(2.0, 1.0);
  m.update_state(5.0, 3.0);
  CHECK(m.result() == 17.0 / 4);
  m.update_state(distribute(logits_t, s.batch_layout(2)));
  CHECK(m.count() == 16);
  CHECK_THROWS_MATCHES(m.update_state(1.0, -1.0), InvalidArgumentError,
                       Message("[Mean::update_state] metric 'm': weight -1 is negative"));
}

TEST_CASE("trainer errors") {
  Problem p;
  Adam opt(0.1);
  CHECK_THROWS_MATCHES(Trainer(p.model, opt, Loss{}), InvalidArgumentError,
                       Message("[Trainer] no loss function"));
  CHECK_THROWS_MATCHES(
      Trainer(p.model, opt, sparse_categorical_crossentropy(),
              metrics_list<SparseCategoricalAccuracy, SparseCategoricalAccuracy>()),
      InvalidArgumentError,
      Message("[Trainer] metric name 'accuracy' is used twice (\"loss\" is taken)"));
  FitOptions bad = quiet(-1);
  CHECK_THROWS_MATCHES(p.trainer.fit(p.train, bad), InvalidArgumentError,
                       Message("[Trainer::fit] epochs (-1), initial_epoch (0), steps_per_epoch "
                               "(0) and validation_steps (0) must be >= 0"));
  bad = quiet(1);
  bad.validation_freq = 0;
  CHECK_THROWS_MATCHES(p.trainer.fit(p.train, bad), InvalidArgumentError,
                       Message("[Trainer::fit] validation_freq must be >= 1, got 0"));
  bad = quiet(1);
  bad.callbacks = {nullptr};
  CHECK_THROWS_MATCHES(p.trainer.fit(p.train, bad), InvalidArgumentError,
                       Message("[Trainer::fit] callback 0 is null"));
  bad = quiet(1);
  bad.validation_data = &p.train;
  CHECK_THROWS_MATCHES(p.trainer.fit(p.train, bad), InvalidArgumentError,
                       Message("[Trainer::fit] validation_data is the training dataset: "
                               "evaluation rewinds it; pass another Dataset over the validation "
                               "examples"));
  data::Dataset unbatched = p.strategy.distribute_dataset(p.digits.images, p.digits.labels);
  CHECK_THROWS_MATCHES(p.trainer.fit(unbatched, quiet(1)), InvalidArgumentError,
                       Message("[Trainer::fit] the training data has no batches (96 examples): "
                               "call batch(global_batch_size) first"));
  CHECK_THROWS_MATCHES(p.trainer.evaluate(unbatched), InvalidArgumentError,
                       Message("[Trainer::evaluate] the data has no batches (96 examples): call "
                               "batch(global_batch_size) first"));
  LambdaCallback unbound;
  CHECK_THROWS_MATCHES(unbound.trainer(), InvalidArgumentError,
                       Message("[Callback::trainer] the callback has not been given to fit or "
                               "evaluate"));
  // A failing callback ends fit with its exception.
  LambdaCallback boom;
  boom.batch_end = [](int64_t b, const Logs&) {
    if (b == 1) throw IoError("boom", "disk full");
  };
  bad = quiet(1);
  bad.callbacks = {&boom};
  CHECK_THROWS_MATCHES(p.trainer.fit(p.train, bad), IoError, Message("[boom] disk full"));
  CHECK(p.trainer.train_data() == nullptr);
}
