#include "train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace dtensor::cli {
namespace {

// Launched as a rank by mpirun (Open MPI, PMIx or another PMI launcher).
bool under_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int terminal_columns(std::FILE* stream) {
  winsize ws{};
  if (ioctl(fileno(stream), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string duration(double seconds) {
  if (seconds < 60) return fixed(seconds, seconds < 10 ? 1 : 0) + "s";
  const long s = static_cast<long>(seconds + 0.5);
  if (s < 3600) return std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h" + std::to_string(s % 3600 / 60) + "m";
}

}  // namespace

bool redraw_in_place(std::FILE* stream) {
  if (const char* forced = std::getenv("DTENSOR_PROGRESS")) {
    if (std::strcmp(forced, "bar") == 0) return true;
    if (std::strcmp(forced, "lines") == 0) return false;
  }
  return isatty(fileno(stream)) && !under_mpirun();
}

std::string format_metrics(const Metrics& metrics) {
  std::string out;
  for (const auto& [name, value] : metrics) {
    if (!out.empty()) out += " - ";
    out += name + ": " + fixed(value, 4);
  }
  return out;
}

Progress::Progress(int64_t epochs, bool enabled, std::FILE* out)
    : epochs_(epochs), enabled_(enabled), out_(out), redraw_(enabled && redraw_in_place(out)) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::begin_epoch(int64_t epoch, int64_t steps, int64_t first_step) {
  epoch_ = epoch;
  steps_ = steps;
  first_step_ = done_ = first_step;
  start_ = std::chrono::steady_clock::now();
  last_draw_ = start_ - std::chrono::seconds(1);  // the first step is always drawn
  if (redraw_) {
    std::fprintf(out_, "Epoch %lld/%lld\n", static_cast<long long>(epoch + 1),
                 static_cast<long long>(epochs_));
    std::fflush(out_);
  }
}

std::string Progress::bar_line(const Metrics& metrics) const {
  const double elapsed = seconds();
  const int64_t ran = done_ - first_step_;
  const double per_step = ran > 0 ? elapsed / static_cast<double>(ran) : 0;
  const std::string count = std::to_string(done_) + "/" + std::to_string(steps_);
  std::string tail;
  if (done_ < steps_) tail += " - ETA: " + duration(per_step * static_cast<double>(steps_ - done_));
  tail += " - " + fixed(per_step * 1e3, 0) + "ms/step";
  if (!metrics.empty()) tail += " - " + format_metrics(metrics);
  // The bar takes what the terminal has left, between 10 and 30 columns, and none below that.
  const int columns = terminal_columns(out_);
  // Room reserved for an ETA even when there is none, so the bar keeps its width to the end.
  const size_t eta = done_ < steps_ ? 0 : 14;
  const int room = columns - 1 - static_cast<int>(count.size() + tail.size() + eta) - 3;
  const int width = std::min(30, room);
  std::string line = count;
  if (width >= 10) {
    const int64_t filled =
        steps_ > 0 ? std::min<int64_t>(width, width * done_ / steps_) : static_cast<int64_t>(width);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < width) {
      if (filled > 0) bar.back() = '>';
      bar += std::string(static_cast<size_t>(width - filled), '.');
    }
    line += " [" + bar + "]";
  }
  line += tail;
  if (static_cast<int>(line.size()) >= columns) line.resize(static_cast<size_t>(columns - 1));
  return line;
}

void Progress::step(int64_t done, const Metrics& metrics) {
  done_ = done;
  if (!redraw_) return;
  const auto now = std::chrono::steady_clock::now();
  // At most ten redraws a second, and always the last step.
  if (done < steps_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::fprintf(out_, "\r%s\x1b[K", bar_line(metrics).c_str());
  std::fflush(out_);
}

double Progress::end_epoch(const Metrics& metrics) {
  const double elapsed = seconds();
  if (!enabled_) return elapsed;
  const int64_t ran = done_ - first_step_;
  const double per_step = ran > 0 ? elapsed / static_cast<double>(ran) : 0;
  std::string line = "Epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(epochs_) + " - " +
                     std::to_string(done_) + "/" + std::to_string(steps_) + " - " +
                     duration(elapsed) + " - " + fixed(per_step * 1e3, 0) + "ms/step";
  if (!metrics.empty()) line += " - " + format_metrics(metrics);
  if (redraw_) std::fputs("\r\x1b[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  return elapsed;
}

}  // namespace dtensor::cli
