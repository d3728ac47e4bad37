#include "examples/mnist/plot.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>

#include "runtime/error.h"

namespace dtensor::examples {
namespace {

constexpr int kPanelWidth = 480;
constexpr int kHeight = 360;
constexpr int kMargin = 40;

struct Rgb {
  uint8_t r, g, b;
};

const Rgb kColors[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};

class Canvas {
 public:
  Canvas(int width, int height) : w_(width), h_(height), pixels_(3 * width * height, 255) {}

  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    uint8_t* p = &pixels_[3 * (y * w_ + x)];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }

  // A thick line by stepping along its longer axis.
  void line(double x0, double y0, double x1, double y1, Rgb c) {
    int steps = static_cast<int>(std::max(std::abs(x1 - x0), std::abs(y1 - y0))) + 1;
    for (int i = 0; i <= steps; ++i) {
      double t = static_cast<double>(i) / steps;
      int x = static_cast<int>(std::lround(x0 + t * (x1 - x0)));
      int y = static_cast<int>(std::lround(y0 + t * (y1 - y0)));
      for (int dx = -1; dx <= 1; ++dx) {
        for (int dy = -1; dy <= 1; ++dy) set(x + dx, y + dy, c);
      }
    }
  }

  void rect(int x0, int y0, int x1, int y1, Rgb c) {
    for (int x = x0; x <= x1; ++x) {
      set(x, y0, c);
      set(x, y1, c);
    }
    for (int y = y0; y <= y1; ++y) {
      set(x0, y, c);
      set(x1, y, c);
    }
  }

  int width() const { return w_; }
  int height() const { return h_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  int w_, h_;
  std::vector<uint8_t> pixels_;
};

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                           static_cast<uInt>(body.size()))));
}

std::string encode_png(const Canvas& canvas) {
  std::string raw;
  const int w = canvas.width(), h = canvas.height();
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    raw.append(reinterpret_cast<const char*>(&canvas.pixels()[3 * y * w]),
               3 * static_cast<size_t>(w));
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  compress2(reinterpret_cast<Bytef*>(&packed[0]), &packed_size,
            reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 6);
  packed.resize(packed_size);
  std::string header;
  put_u32(header, static_cast<uint32_t>(w));
  put_u32(header, static_cast<uint32_t>(h));
  header += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, no interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  chunk(png, "IHDR", header);
  chunk(png, "IDAT", packed);
  chunk(png, "IEND", "");
  return png;
}

void draw_panel(Canvas& canvas, int left, const Panel& panel) {
  const int x0 = left + kMargin, x1 = left + kPanelWidth - kMargin / 2;
  const int y0 = kMargin / 2, y1 = kHeight - kMargin;
  canvas.rect(x0, y0, x1, y1, {0, 0, 0});
  double lo = INFINITY, hi = -INFINITY;
  size_t n = 0;
  for (const Series& s : panel.series) {
    for (double v : s.values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    n = std::max(n, s.values.size());
  }
  if (n == 0) return;
  if (hi - lo < 1e-12) hi = lo + 1;
  auto px = [&](size_t i) {
    return x0 + (n == 1 ? 0.5 : static_cast<double>(i) / (n - 1)) * (x1 - x0);
  };
  auto py = [&](double v) { return y1 - (v - lo) / (hi - lo) * (y1 - y0); };
  for (size_t k = 0; k < panel.series.size(); ++k) {
    const auto& v = panel.series[k].values;
    Rgb c = kColors[k % 4];
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) canvas.line(px(i - 1), py(v[i - 1]), px(i), py(v[i]), c);
      for (int d = -3; d <= 3; ++d)
        canvas.line(px(i) - 3, py(v[i]) + d, px(i) + 3, py(v[i]) + d, c);
    }
    // A legend swatch per series along the bottom margin.
    int lx = x0 + static_cast<int>(k) * 60;
    for (int d = 0; d < 6; ++d) canvas.line(lx, y1 + 15 + d, lx + 40, y1 + 15 + d, c);
  }
}

}  // namespace

void write_line_chart_png(const std::string& path, const std::vector<Panel>& panels) {
  Canvas canvas(kPanelWidth * static_cast<int>(std::max<size_t>(panels.size(), 1)), kHeight);
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(canvas, static_cast<int>(i) * kPanelWidth, panels[i]);
  std::ofstream out(path, std::ios::binary);
  std::string png = encode_png(canvas);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  if (!out) throw_error<IoError>("write_line_chart_png", "cannot write '{}'", path);
}

}  // namespace dtensor::examples
