// Training curves as a PNG, drawn with cairo: one panel per metric (loss, accuracy), each with a
// title, labelled axes with ticks and numbers, a grid, a legend naming its series, and ranges
// rounded out to tick marks with a margin (one epoch sits in the middle, not on an edge).
//
//   cli::write_training_plot("m.png", {{"Loss", "loss", {{"train", tl}, {"test", vl}}},
//                                     {"Accuracy", "accuracy", {{"train", ta}, {"test", va}}, 0,
//                                     1}});
//
// Non-finite values are left out of the lines. A series of at most 100 points gets a dot on each.
// Thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtensor::cli {

struct Series {
  std::string name;
  std::vector<double> values;  // one per epoch, epoch 1 first
  // Where each value sits on the x axis, when not at 1, 2, ... (held-out losses every 100 steps).
  std::vector<double> x = {};
};

struct Panel {
  std::string title;
  std::string y_label;
  std::vector<Series> series;
  // Limits the y range never goes beyond (accuracy: 0 and 1).
  std::optional<double> y_min, y_max;
  std::string x_label = "epoch";
};

// The image size of write_training_plot: kPanelWidth per panel side by side.
constexpr int kPanelWidth = 600;
constexpr int kPlotHeight = 450;

// Writes the panels side by side to `path` (PNG, RGB); IoError if it cannot be written.
void write_training_plot(const std::string& path, const std::vector<Panel>& panels);

// Tick marks for [lo, hi]: about `target` of them at 1, 2 or 5 times a power of ten. The range is
// widened to the outer ticks. Exposed for tests.
std::vector<double> nice_ticks(double& lo, double& hi, int target = 6);

}  // namespace dtensor::cli
