// The training plot: a PNG of the expected size with text drawn where the titles, tick numbers
// and axis labels go, for 1 and 10 epochs; tick ranges that keep points off the edges.
#include "cli/plot.h"

#include <cairo/cairo.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "runtime/error.h"

using namespace dtensor;
using namespace dtensor::cli;

namespace {

std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::vector<Panel> curves(int epochs) {
  std::vector<double> tl, vl, ta, va;
  for (int e = 0; e < epochs; ++e) {
    tl.push_back(1.0 / (e + 1));
    vl.push_back(1.2 / (e + 1) + 0.05);
    ta.push_back(0.9 - 0.4 / (e + 1));
    va.push_back(0.88 - 0.4 / (e + 1));
  }
  return {{"Loss", "loss", {{"train", tl}, {"test", vl}}, 0.0, std::nullopt},
          {"Accuracy", "accuracy", {{"train", ta}, {"test", va}}, 0.0, 1.0}};
}

// Pixels in [x0, x1) x [y0, y1) that are not the white background.
int inked(cairo_surface_t* s, int x0, int y0, int x1, int y1) {
  const unsigned char* data = cairo_image_surface_get_data(s);
  const int stride = cairo_image_surface_get_stride(s);
  int n = 0;
  for (int y = y0; y < y1; ++y) {
    const auto* row = reinterpret_cast<const uint32_t*>(data + y * stride);
    for (int x = x0; x < x1; ++x) n += (row[x] & 0xffffff) != 0xffffff;
  }
  return n;
}

void check_plot(int epochs) {
  const std::string path = tmp_path("plot_" + std::to_string(epochs) + ".png");
  write_training_plot(path, curves(epochs));
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  REQUIRE(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS);
  CHECK(cairo_image_surface_get_width(s) == 2 * kPanelWidth);
  CHECK(cairo_image_surface_get_height(s) == kPlotHeight);
  cairo_surface_flush(s);
  for (int p = 0; p < 2; ++p) {
    const int x0 = p * kPanelWidth;
    INFO("panel " << p << ", " << epochs << " epochs");
    CHECK(inked(s, x0 + 200, 0, x0 + 400, 40) > 50);                              // title
    CHECK(inked(s, x0 + 30, 60, x0 + 75, 320) > 50);                              // y tick numbers
    CHECK(inked(s, x0, 120, x0 + 28, 260) > 30);                                  // y axis label
    CHECK(inked(s, x0 + 80, 336, x0 + 570, 354) > 20);                            // x tick numbers
    CHECK(inked(s, x0 + 250, 360, x0 + 420, 395) > 30);                           // "epoch"
    CHECK(inked(s, x0 + 80, kPlotHeight - 32, x0 + 300, kPlotHeight - 12) > 50);  // legend
  }
  cairo_surface_destroy(s);
}

}  // namespace

TEST_CASE("the training plot is a PNG with titles, tick numbers, axis labels and legends") {
  check_plot(1);
  check_plot(10);
}

TEST_CASE("tick ranges are widened to round numbers around the data") {
  double lo = 0.13, hi = 0.87;
  std::vector<double> ticks = nice_ticks(lo, hi);
  CHECK(lo == Approx(0.0));
  CHECK(hi == Approx(1.0));
  CHECK(ticks.size() == 6);
  lo = 2.3, hi = 2.3;  // one value: still a range
  ticks = nice_ticks(lo, hi);
  CHECK(hi > lo);
}

TEST_CASE("a plot to an unwritable path is an IoError naming the path") {
  CHECK_THROWS_AS(write_training_plot("/proc/no/plot.png", curves(2)), IoError);
  CHECK_THROWS_WITH(write_training_plot("/proc/no/plot.png", curves(2)),
                    Catch::Matchers::StartsWith(
                        "[write_training_plot] cannot write '/proc/no/plot.png'"));
}
