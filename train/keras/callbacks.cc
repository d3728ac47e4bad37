#include "train/keras/callbacks.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "runtime/error.h"
#include "runtime/process.h"
#include "train/keras/trainer.h"
#include "train/progress.h"

namespace dtensor::keras {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string format_value(double v) {
  if (v == 0 || std::isnan(v) || std::isinf(v) || std::abs(v) >= 1e-3) {
    return fmt::format("{:.4f}", v);
  }
  return fmt::format("{:.4e}", v);
}

// Shortest text that reads back to `v`; JSON has no NaN or infinities, written as Python does.
std::string exact_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

// A JSON string literal, every character escaped as JSON requires.
std::string json_string(const std::string& s) { return nlohmann::json(s).dump(); }

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

std::string format_logs(const Logs& logs) {
  // Keras's order: loss, the other metrics, then the validation ones likewise.
  std::vector<std::string> keys;
  for (bool val : {false, true}) {
    const std::string loss = val ? "val_loss" : "loss";
    if (logs.count(loss)) keys.push_back(loss);
    for (const auto& [name, value] : logs) {
      if ((name.rfind("val_", 0) == 0) == val && name != loss) keys.push_back(name);
    }
  }
  std::string out;
  for (const std::string& k : keys) {
    out += (out.empty() ? "" : " - ") + k + ": " + format_value(logs.at(k));
  }
  return out;
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(Options options) : options_(std::move(options)) {
  const char* fn = "EarlyStopping";
  if (options_.monitor.empty()) throw_error<InvalidArgumentError>(fn, "no value to monitor");
  if (options_.patience < 0 || options_.start_from_epoch < 0) {
    throw_error<InvalidArgumentError>(fn, "patience ({}) and start_from_epoch ({}) must be >= 0",
                                      options_.patience, options_.start_from_epoch);
  }
  options_.min_delta = std::abs(options_.min_delta);
  maximize_ = options_.mode == Mode::kMax ||
              (options_.mode == Mode::kAuto && options_.monitor.find("acc") != std::string::npos);
}

bool EarlyStopping::improves(double value, double reference) const {
  return maximize_ ? value - options_.min_delta > reference
                   : value + options_.min_delta < reference;
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = 0;
  stopped_epoch_ = -1;
  best_epoch_ = -1;
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  has_best_weights_ = 0;
  best_weights_.clear();
  if (options_.restore_best_weights) {
    for (const DVariable& v : trainer().model().variables()) {
      best_weights_.emplace_back(v.value(), v.name());
    }
  }
}

void EarlyStopping::on_epoch_end(int64_t epoch, const Logs& logs) {
  auto it = logs.find(options_.monitor);
  if (it == logs.end()) {
    std::string names;
    for (const auto& [name, value] : logs) names += (names.empty() ? "" : ", ") + name;
    std::cerr << fmt::format(
        "[EarlyStopping] warning: '{}' is not in the logs of epoch {} (they have {})\n",
        options_.monitor, epoch, names);
    return;
  }
  if (epoch < options_.start_from_epoch) return;
  const std::vector<DVariable> vars = trainer().model().variables();
  auto keep_weights = [&] {
    for (size_t i = 0; i < best_weights_.size() && i < vars.size(); ++i) {
      best_weights_[i].assign(vars[i].value());
    }
    has_best_weights_ = 1;
  };
  if (options_.restore_best_weights && !has_best_weights_) {
    keep_weights();
    best_epoch_ = epoch;
  }
  ++wait_;
  const double current = it->second;
  if (improves(current, best_)) {
    best_ = current;
    best_epoch_ = epoch;
    if (options_.restore_best_weights) keep_weights();
    if (!options_.baseline || improves(current, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    trainer().set_stop_training(true);
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (!options_.restore_best_weights || !has_best_weights_) return;
  std::vector<DVariable> vars = trainer().model().variables();
  for (size_t i = 0; i < best_weights_.size() && i < vars.size(); ++i) {
    vars[i].assign(best_weights_[i].value());
  }
}

void EarlyStopping::track_state(const std::string& prefix, StateRefs& refs) {
  refs.ints.emplace_back(prefix + "wait", &wait_);
  refs.ints.emplace_back(prefix + "best_epoch", &best_epoch_);
  refs.ints.emplace_back(prefix + "stopped_epoch", &stopped_epoch_);
  refs.ints.emplace_back(prefix + "has_best_weights", &has_best_weights_);
  refs.doubles.emplace_back(prefix + "best", &best_);
  for (size_t i = 0; i < best_weights_.size(); ++i) {
    refs.variables.emplace_back(prefix + "best_weights/" + std::to_string(i), best_weights_[i]);
  }
}

// ---- MetricsLogger ----

MetricsLogger::MetricsLogger(std::string path, Format format, bool append)
    : path_(std::move(path)), format_(format), append_(append) {
  if (path_.empty()) throw_error<InvalidArgumentError>("MetricsLogger", "empty path");
  if (format_ == Format::kAuto) {
    const std::string ext = ".csv";
    const bool csv = path_.size() >= ext.size() &&
                     path_.compare(path_.size() - ext.size(), ext.size(), ext) == 0;
    format_ = csv ? Format::kCsv : Format::kJsonLines;
  }
}

void MetricsLogger::on_train_begin(const Logs&) {
  length_ = -1;
  columns_.clear();
}

void MetricsLogger::track_state(const std::string& prefix, StateRefs& refs) {
  refs.ints.emplace_back(prefix + "length", &length_);
}

void MetricsLogger::on_epoch_end(int64_t epoch, const Logs& epoch_logs) {
  if (this_process().index != 0) return;
  Logs logs = epoch_logs;
  if (add_fields) add_fields(epoch, logs);
  const char* fn = "MetricsLogger";
  namespace fs = std::filesystem;
  std::error_code ec;
  if (length_ >= 0) {
    // Continuing: drop whatever a run that was interrupted wrote after the saved state.
    if (fs::exists(path_, ec) && static_cast<int64_t>(fs::file_size(path_, ec)) > length_) {
      fs::resize_file(path_, static_cast<uintmax_t>(length_), ec);
      if (ec) throw_error<IoError>(fn, "cannot truncate '{}': {}", path_, ec.message());
    }
  } else if (!append_) {
    std::ofstream truncate(path_, std::ios::trunc);
    if (!truncate) throw_error<IoError>(fn, "cannot write '{}'", path_);
  }
  std::string row;
  if (format_ == Format::kCsv) {
    if (columns_.empty()) {
      std::ifstream in(path_);
      std::string header;
      if (in && std::getline(in, header) && !header.empty()) columns_ = split_csv_line(header);
    }
    if (columns_.empty()) {
      columns_.push_back("epoch");
      for (const auto& [name, value] : logs) columns_.push_back(name);
      for (size_t i = 0; i < columns_.size(); ++i) row += (i ? "," : "") + columns_[i];
      row += "\n";
    }
    for (size_t i = 0; i < columns_.size(); ++i) {
      if (i) row += ",";
      if (columns_[i] == "epoch") {
        row += std::to_string(epoch);
      } else if (auto it = logs.find(columns_[i]); it != logs.end()) {
        row += exact_number(it->second);
      }
    }
    row += "\n";
  } else {
    row = "{\"epoch\":" + std::to_string(epoch);
    for (const auto& [name, value] : logs)
      row += "," + json_string(name) + ":" + exact_number(value);
    row += "}\n";
  }
  std::ofstream out(path_, std::ios::app | std::ios::binary);
  out << row;
  out.flush();
  if (!out) throw_error<IoError>(fn, "cannot write '{}'", path_);
  out.close();
  length_ = static_cast<int64_t>(fs::file_size(path_, ec));
  if (ec) throw_error<IoError>(fn, "cannot stat '{}': {}", path_, ec.message());
}

// ---- ProgressBar ----

ProgressBar::ProgressBar(std::ostream& out, Mode mode) : out_(out), mode_(mode) {}

void ProgressBar::on_train_begin(const Logs&) {
  if (mode_ == Mode::kAuto) {
    // The examples' rule: a real terminal, and not a rank of an mpirun job (whose pty may be a
    // file).
    bar_ = (&out_ == &std::cout && cli::redraw_in_place(stdout)) ||
           (&out_ == &std::cerr && cli::redraw_in_place(stderr));
  } else {
    bar_ = mode_ == Mode::kBar;
  }
}

void ProgressBar::on_epoch_begin(int64_t epoch, const Logs&) {
  epoch_start_ = now_seconds();
  steps_done_ = first_step_ = trainer().counters().step_in_epoch;
  if (bar_) out_ << "Epoch " << epoch + 1 << "/" << trainer().params().epochs << "\n" << std::flush;
}

namespace {

// `ran` of the `done` steps ran in this process (the others before a restore) in `seconds`.
std::string bar_line(int64_t done, int64_t ran, int64_t total, double seconds, const Logs& logs) {
  const int width = 30;
  const int64_t filled = total > 0 ? std::min<int64_t>(width, width * done / total) : width;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) {
    if (filled > 0) bar.back() = '>';
    bar += std::string(static_cast<size_t>(width - filled), '.');
  }
  const double per_step = ran > 0 ? seconds / static_cast<double>(ran) : 0;
  return fmt::format("{}/{} [{}] - {:.0f}s {:.0f}ms/step - {}", done, total, bar, seconds,
                     per_step * 1e3, format_logs(logs));
}

}  // namespace

void ProgressBar::on_train_batch_end(int64_t batch, const Logs& logs) {
  steps_done_ = batch + 1;
  if (!bar_) return;
  out_ << "\r"
       << bar_line(steps_done_, steps_done_ - first_step_, trainer().params().steps_per_epoch,
                   now_seconds() - epoch_start_, logs)
       << "\x1b[K" << std::flush;
}

void ProgressBar::on_epoch_end(int64_t epoch, const Logs& logs) {
  const double seconds = now_seconds() - epoch_start_;
  if (bar_) {
    out_ << "\r"
         << bar_line(steps_done_, steps_done_ - first_step_, trainer().params().steps_per_epoch,
                     seconds, logs)
         << "\x1b[K\n"
         << std::flush;
    return;
  }
  out_ << fmt::format("Epoch {}/{} - {} steps - {:.1f}s - {}\n", epoch + 1,
                      trainer().params().epochs, steps_done_, seconds, format_logs(logs))
       << std::flush;
}

void ProgressBar::on_train_end(const Logs&) { out_ << std::flush; }

}  // namespace dtensor::keras
