#include "cli/plot.h"

#include <cairo/cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "runtime/error.h"

namespace dtensor::cli {
namespace {

struct Color {
  double r, g, b;
};
// matplotlib's first colours: blue for train, orange for test, then green, red.
constexpr Color kColors[] = {
    {0.122, 0.467, 0.706}, {1.0, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157}};

struct Box {
  double left, top, width, height;
};

std::string tick_label(double v, double step) {
  // As many decimals as the step needs.
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, std::abs(v) < step * 1e-9 ? 0.0 : v);
  return buf;
}

void text(cairo_t* cr, const std::string& s, double x, double y, double size, double align_x,
          double align_y, bool bold = false) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - e.x_bearing - e.width * align_x, y - e.y_bearing - e.height * align_y);
  cairo_show_text(cr, s.c_str());
}

// The y range of a panel: its finite values with a 10% margin, within its limits.
void y_range(const Panel& panel, double& lo, double& hi) {
  lo = std::numeric_limits<double>::infinity();
  hi = -lo;
  for (const Series& s : panel.series) {
    for (double v : s.values) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  const double span = hi - lo;
  const double margin = span > 0 ? 0.1 * span : std::max(0.05 * std::abs(hi), 0.05);
  lo -= margin;
  hi += margin;
  if (panel.y_min) lo = std::max(lo, *panel.y_min);
  if (panel.y_max) hi = std::min(hi, *panel.y_max);
  if (hi <= lo) hi = lo + 1;
}

void draw_panel(cairo_t* cr, const Panel& panel, double x0, size_t epochs) {
  const Box plot{x0 + 80, 50, kPanelWidth - 110.0, kPlotHeight - 120.0};
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text(cr, panel.title, x0 + kPanelWidth / 2.0, 18, 18, 0.5, 0, /*bold=*/true);

  // Epochs 1..n, half an epoch of room on each side, integer ticks.
  double x_lo = 0.5, x_hi = static_cast<double>(std::max<size_t>(epochs, 1)) + 0.5;
  double t_lo = 1, t_hi = static_cast<double>(std::max<size_t>(epochs, 1));
  std::vector<double> x_ticks = nice_ticks(t_lo, t_hi, 8);
  double step_x = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
  if (step_x < 1) {
    x_ticks.clear();
    for (size_t e = 1; e <= std::max<size_t>(epochs, 1); ++e) x_ticks.push_back(e);
    step_x = 1;
  }
  double y_lo, y_hi;
  y_range(panel, y_lo, y_hi);
  std::vector<double> y_ticks = nice_ticks(y_lo, y_hi, 6);
  if (panel.y_min) y_lo = std::max(y_lo, *panel.y_min);
  if (panel.y_max) y_hi = std::min(y_hi, *panel.y_max);
  auto px = [&](double x) { return plot.left + (x - x_lo) / (x_hi - x_lo) * plot.width; };
  auto py = [&](double y) { return plot.top + (y_hi - y) / (y_hi - y_lo) * plot.height; };

  // Grid and ticks.
  cairo_set_line_width(cr, 1);
  for (double y : y_ticks) {
    if (y < y_lo - 1e-12 || y > y_hi + 1e-12) continue;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, plot.left, std::round(py(y)) + 0.5);
    cairo_line_to(cr, plot.left + plot.width, std::round(py(y)) + 0.5);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text(cr, tick_label(y, y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1), plot.left - 8, py(y),
         12, 1, 0.5);
  }
  for (double x : x_ticks) {
    if (x < x_lo || x > x_hi) continue;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, std::round(px(x)) + 0.5, plot.top);
    cairo_line_to(cr, std::round(px(x)) + 0.5, plot.top + plot.height);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text(cr, tick_label(x, step_x), px(x), plot.top + plot.height + 8, 12, 0.5, 0);
  }
  // Frame and axis labels.
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, plot.left + 0.5, plot.top + 0.5, plot.width, plot.height);
  cairo_stroke(cr);
  text(cr, panel.x_label, plot.left + plot.width / 2, plot.top + plot.height + 30, 14, 0.5, 0);
  cairo_save(cr);
  cairo_translate(cr, x0 + 16, plot.top + plot.height / 2);
  cairo_rotate(cr, -M_PI / 2);
  text(cr, panel.y_label, 0, 0, 14, 0.5, 0.5);
  cairo_restore(cr);

  // The series: lines through the finite points, a dot on each.
  cairo_save(cr);
  cairo_rectangle(cr, plot.left, plot.top, plot.width, plot.height);
  cairo_clip(cr);
  for (size_t s = 0; s < panel.series.size(); ++s) {
    const Color c = kColors[s % 4];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 2.5);
    bool drawing = false;
    const std::vector<double>& v = panel.series[s].values;
    auto at = [&xs = panel.series[s].x](size_t i) {
      return i < xs.size() ? xs[i] : static_cast<double>(i + 1);
    };
    for (size_t i = 0; i < v.size(); ++i) {
      if (!std::isfinite(v[i])) {
        drawing = false;
        continue;
      }
      const double x = px(at(i)), y = py(v[i]);
      drawing ? cairo_line_to(cr, x, y) : cairo_move_to(cr, x, y);
      drawing = true;
    }
    cairo_stroke(cr);
    for (size_t i = 0; i < v.size() && v.size() <= 100; ++i) {
      if (!std::isfinite(v[i])) continue;
      cairo_arc(cr, px(at(i)), py(v[i]), 4, 0, 2 * M_PI);
      cairo_fill(cr);
    }
  }
  cairo_restore(cr);

  // Legend: below the axis label, one swatch and name per series.
  double lx = plot.left;
  const double ly = kPlotHeight - 22;
  for (size_t s = 0; s < panel.series.size(); ++s) {
    const Color c = kColors[s % 4];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 3);
    cairo_move_to(cr, lx, ly);
    cairo_line_to(cr, lx + 24, ly);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text(cr, panel.series[s].name, lx + 30, ly, 13, 0, 0.5);
    cairo_text_extents_t e;
    cairo_text_extents(cr, panel.series[s].name.c_str(), &e);
    lx += 30 + e.x_advance + 24;
  }
}

}  // namespace

std::vector<double> nice_ticks(double& lo, double& hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(target - 1, 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  lo = std::floor(lo / step + 1e-9) * step;
  hi = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (double t = lo; t <= hi + step * 1e-6; t += step) ticks.push_back(t);
  return ticks;
}

void write_training_plot(const std::string& path, const std::vector<Panel>& panels) {
  size_t epochs = 0;
  for (const Panel& p : panels) {
    for (const Series& s : p.series) {
      epochs = std::max(epochs, s.values.size());
      if (!s.x.empty()) epochs = std::max(epochs, static_cast<size_t>(std::ceil(s.x.back())));
    }
  }
  const int width = kPanelWidth * std::max<int>(1, static_cast<int>(panels.size()));
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, kPlotHeight), &cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()),
                                                        &cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(cr.get(), panels[i], static_cast<double>(i) * kPanelWidth, epochs);
  }
  cairo_surface_flush(surface.get());
  const cairo_status_t status = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (status != CAIRO_STATUS_SUCCESS) {
    throw_error<IoError>("write_training_plot", "cannot write '{}': {}", path,
                         cairo_status_to_string(status));
  }
}

}  // namespace dtensor::cli

// cairo's text API loads fonts through fontconfig, which keeps patterns it resolved until the
// process exits and never frees them; LeakSanitizer (--config=asan) would report those on every
// program that draws a plot. This hook, read only by LeakSanitizer, leaves them out.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfontconfig.so\n"; }
