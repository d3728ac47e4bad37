// The examples' training progress, Keras style:
//
//   Epoch 2/3
//   17/40 [=======>..........] - ETA: 1s - 31ms/step - loss: 0.4123 - accuracy: 0.8812
//
// redrawn in place while an epoch runs, then left as one line per epoch with its time, step time
// and metrics (train and test):
//
//   Epoch 2/3 - 40/40 - 1.2s - 31ms/step - loss: 0.3012 - accuracy: 0.9121 - val_loss: ...
//
// Redrawing (carriage returns and ESC[K) happens only on a real terminal: the output is a tty
// and this process is not a rank of an mpirun job (Open MPI gives every rank a pty even when the
// job's output goes to a file). Otherwise only the per-epoch lines are written, with no control
// characters. DTENSOR_PROGRESS=bar or =lines overrides the detection. A disabled Progress (every
// process but the first) prints nothing. The bar is cut to the terminal's width.
//
// Not thread-safe: call from the training loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dtensor::cli {

using Metrics = std::vector<std::pair<std::string, double>>;

// Whether `stream` may be redrawn in place (see above).
bool redraw_in_place(std::FILE* stream);

class Progress {
 public:
  // `epochs` in all; `enabled` false prints nothing.
  Progress(int64_t epochs, bool enabled, std::FILE* out = stdout);

  // Epoch `epoch` (0-based) of `steps` steps begins, `first_step` of them done before (resumed).
  void begin_epoch(int64_t epoch, int64_t steps, int64_t first_step = 0);
  // `done` steps of the epoch are done; `metrics` are the running values.
  void step(int64_t done, const Metrics& metrics);
  // The epoch's final line with its metrics. Returns the epoch's wall time in seconds.
  double end_epoch(const Metrics& metrics);

  bool redraws() const { return redraw_; }

 private:
  double seconds() const;
  std::string bar_line(const Metrics& metrics) const;

  int64_t epochs_;
  bool enabled_;
  std::FILE* out_;
  bool redraw_;
  int64_t epoch_ = 0, steps_ = 0, first_step_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "loss: 0.4123 - accuracy: 0.8812"
std::string format_metrics(const Metrics& metrics);

}  // namespace dtensor::cli
