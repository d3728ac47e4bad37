// synthetic_digits (declared in idx.h): digit-like stroke images drawn from a counter-based seed.

#include <algorithm>
#include <array>
#include <cmath>

#include "runtime/error.h"
#include "train/data/idx.h"
#include "train/data/internal/rng.h"

namespace dtensor::data {

namespace {

constexpr int64_t kSide = 28;

using internal::Rng;

struct Point {
  double u, v;  // in the digit's unit box: u rightwards, v downwards
};
struct Stroke {
  int from, to;  // indices into the key points
};

// Key points: the corners and middles of the seven-segment box, then extras for 1, 4 and 7.
enum : int { TL, TR, ML, MR, BL, BR, TC, BC, FLAG, D4A, D4B, D4C, D4D, BOT7, kNumPoints };
constexpr std::array<Point, kNumPoints> kPoints = {{
    {0, 0},       // TL
    {1, 0},       // TR
    {0, 0.5},     // ML
    {1, 0.5},     // MR
    {0, 1},       // BL
    {1, 1},       // BR
    {0.55, 0},    // TC: top of the 1
    {0.55, 1},    // BC: its foot
    {0.2, 0.25},  // FLAG: the end of its flag
    {0.75, 0},    // D4A: top of the 4's upright and diagonal
    {0, 0.65},    // D4B: the diagonal's end
    {1, 0.65},    // D4C: the crossbar's end
    {0.75, 1},    // D4D: the upright's foot
    {0.35, 1},    // BOT7: the foot of the 7's leg
}};

struct Glyph {
  int count;
  std::array<Stroke, 7> strokes;
};
constexpr Stroke a{TL, TR}, b{TR, MR}, c{MR, BR}, d{BL, BR}, e{ML, BL}, f{TL, ML}, g{ML, MR};
const std::array<Glyph, 10> kGlyphs = {{
    {6, {a, b, c, d, e, f}},                                      // 0
    {2, {Stroke{TC, BC}, Stroke{TC, FLAG}}},                      // 1: centred, with a flag
    {5, {a, b, g, e, d}},                                         // 2
    {5, {a, b, g, c, d}},                                         // 3
    {3, {Stroke{D4A, D4B}, Stroke{D4B, D4C}, Stroke{D4A, D4D}}},  // 4: open, with a diagonal
    {5, {a, f, g, c, d}},                                         // 5
    {6, {a, f, e, d, c, g}},                                      // 6
    {2, {a, Stroke{TR, BOT7}}},                                   // 7: a diagonal leg
    {7, {a, b, c, d, e, f, g}},                                   // 8
    {6, {a, b, c, d, f, g}},                                      // 9
}};

// Squared distance from (x, y) to the segment (x0, y0)-(x1, y1).
double segment_distance2(double x, double y, double x0, double y0, double x1, double y1) {
  const double dx = x1 - x0, dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0.0;
  t = std::min(1.0, std::max(0.0, t));
  const double px = x0 + t * dx - x, py = y0 + t * dy - y;
  return px * px + py * py;
}

// Draws one digit into `out` (kSide*kSide pixels in [0, 1]).
void render(int label, Rng& rng, float* out) {
  // Box size and place, slant, stroke half-width, ink intensity.
  const double w = rng.uniform(9, 15), h = rng.uniform(15, 21);
  const double x0 = rng.uniform(3, kSide - 3 - w), y0 = rng.uniform(3, kSide - 3 - h);
  const double slant = rng.uniform(-0.25, 0.25);
  const double radius = rng.uniform(0.7, 1.7);
  const double ink = rng.uniform(0.75, 1.0);
  std::array<double, kNumPoints> px, py;
  for (int p = 0; p < kNumPoints; ++p) {
    const double u = kPoints[p].u + rng.uniform(-0.08, 0.08);
    const double v = kPoints[p].v + rng.uniform(-0.05, 0.05);
    px[p] = x0 + u * w + slant * (0.5 - v) * h;
    py[p] = y0 + v * h;
  }
  const Glyph& glyph = kGlyphs[static_cast<size_t>(label)];
  for (int64_t row = 0; row < kSide; ++row) {
    for (int64_t col = 0; col < kSide; ++col) {
      const double x = static_cast<double>(col) + 0.5, y = static_cast<double>(row) + 0.5;
      double dist2 = 1e18;
      for (int s = 0; s < glyph.count; ++s) {
        const Stroke& st = glyph.strokes[static_cast<size_t>(s)];
        dist2 = std::min(dist2,
                         segment_distance2(x, y, px[st.from], py[st.from], px[st.to], py[st.to]));
      }
      const double dist = std::sqrt(dist2);
      double value = ink * std::min(1.0, std::max(0.0, radius + 0.5 - dist));
      if (value > 0) value *= rng.uniform(0.85, 1.0);                            // uneven ink
      if (rng.uniform() < 0.03) value = std::max(value, rng.uniform(0.2, 0.7));  // speckles
      out[row * kSide + col] = static_cast<float>(value);
    }
  }
}

}  // namespace

MnistSplit synthetic_digits(int64_t n, uint64_t seed) {
  if (n < 0) throw_error<InvalidArgumentError>("synthetic_digits", "n = {} must be >= 0", n);
  MnistSplit split{Tensor::empty({n, kSide * kSide}, DType::kF32), Tensor::empty({n}, DType::kI32)};
  float* images = split.images.data<float>();
  int32_t* labels = split.labels.data<int32_t>();
  std::array<int32_t, 10> order{};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 10 == 0) {  // each block of ten holds every class once, shuffled
      Rng block_rng(seed, /*stream=*/1, static_cast<uint64_t>(i / 10));
      for (int32_t k = 0; k < 10; ++k) order[static_cast<size_t>(k)] = k;
      for (uint64_t k = 9; k > 0; --k) std::swap(order[k], order[block_rng.below(k + 1)]);
    }
    const int32_t label = order[static_cast<size_t>(i % 10)];
    labels[i] = label;
    Rng rng(seed, /*stream=*/2, static_cast<uint64_t>(i));
    render(label, rng, images + i * kSide * kSide);
  }
  return split;
}

}  // namespace dtensor::data
