// A small line-chart writer for training curves: one PNG with a panel per metric group (the seed's
// plot_metrics: loss and accuracy per epoch, train and test). Dependency-free apart from zlib.
#pragma once

#include <string>
#include <vector>

namespace dtensor::examples {

struct Series {
  std::string name;
  std::vector<double> values;  // one per epoch
};

struct Panel {
  std::string title;
  std::vector<Series> series;
};

// Writes `panels` side by side to `path` as an RGB PNG; throws IoError if the file cannot be
// written.
void write_line_chart_png(const std::string& path, const std::vector<Panel>& panels);

}  // namespace dtensor::examples
