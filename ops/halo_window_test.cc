// HaloWindow2d on its own: a direct convolution run on every device's extended window (with its
// local padding) gives that device's chunk of the single-device output, and the adjoint of the
// exchanges turns the windows' input gradients into the single-device input gradient. Random
// meshes, H/W/batch sharding (uneven and empty shards), filters, strides, dilations, padding.
#include "ops/halo_window.h"

#include <catch2/catch.hpp>

#include <random>

#include "dtensor/collectives.h"
#include "runtime/block.h"
#include "tests/layout_enumeration.h"
#include "tests/test_tensors.h"

using namespace dtensor;
using dtensor::testing::all_layouts;
using dtensor::testing::integer_tensor;
using dtensor::testing::standard_meshes;

namespace {

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

struct Geometry {
  WindowDim h, w;
  LocalPadding pad;  // the op's padding (after = bottom/right)
};

int64_t out_size(int64_t in, int64_t before, int64_t after, const WindowDim& d) {
  return (in + before + after - ((d.filter - 1) * d.dilation + 1)) / d.stride + 1;
}

// The reference: y[n,oh,ow,o] = sum x[n, oh*s-pt+kh*d, ow*s-pl+kw*d, c] w[kh,kw,c,o] (f64), and
// its gradient with respect to x.
Tensor direct_conv(const Tensor& x, const Tensor& w, const WindowDim& h, const WindowDim& wd,
                   const LocalPadding& p) {
  const int64_t n = x.dim(0), ih = x.dim(1), iw = x.dim(2), c = x.dim(3), o = w.dim(3);
  const int64_t oh = out_size(ih, p.top, p.bottom, h), ow = out_size(iw, p.left, p.right, wd);
  Tensor y = Tensor::zeros({n, oh, ow, o}, DType::kF64);
  const double* xs = x.data<double>();
  const double* ws = w.data<double>();
  double* ys = y.data<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q)
        for (int64_t kh = 0; kh < h.filter; ++kh)
          for (int64_t kw = 0; kw < wd.filter; ++kw) {
            const int64_t xr = r * h.stride - p.top + kh * h.dilation;
            const int64_t xq = q * wd.stride - p.left + kw * wd.dilation;
            if (xr < 0 || xr >= ih || xq < 0 || xq >= iw) continue;
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t co = 0; co < o; ++co) {
                ys[((b * oh + r) * ow + q) * o + co] +=
                    xs[((b * ih + xr) * iw + xq) * c + ci] *
                    ws[((kh * wd.filter + kw) * c + ci) * o + co];
              }
          }
  return y;
}

Tensor direct_conv_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                                  const WindowDim& h, const WindowDim& wd, const LocalPadding& p) {
  const int64_t n = x_shape[0], ih = x_shape[1], iw = x_shape[2], c = x_shape[3], o = w.dim(3);
  const int64_t oh = dy.dim(1), ow = dy.dim(2);
  Tensor dx = Tensor::zeros(x_shape, DType::kF64);
  double* dxs = dx.data<double>();
  const double* ws = w.data<double>();
  const double* dys = dy.data<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q)
        for (int64_t kh = 0; kh < h.filter; ++kh)
          for (int64_t kw = 0; kw < wd.filter; ++kw) {
            const int64_t xr = r * h.stride - p.top + kh * h.dilation;
            const int64_t xq = q * wd.stride - p.left + kw * wd.dilation;
            if (xr < 0 || xr >= ih || xq < 0 || xq >= iw) continue;
            for (int64_t ci = 0; ci < c; ++ci)
              for (int64_t co = 0; co < o; ++co) {
                dxs[((b * ih + xr) * iw + xq) * c + ci] +=
                    dys[((b * oh + r) * ow + q) * o + co] *
                    ws[((kh * wd.filter + kw) * c + ci) * o + co];
              }
          }
  return dx;
}

WindowDim random_dim(std::mt19937_64& rng, int64_t in, int64_t* pad_after) {
  for (;;) {
    WindowDim d{uniform(rng, 1, 5), uniform(rng, 1, 3), uniform(rng, 1, 2), 0};
    const int64_t span = (d.filter - 1) * d.dilation + 1;
    d.pad_before = uniform(rng, 0, span - 1);
    *pad_after = uniform(rng, 0, span - 1);
    if (in + d.pad_before + *pad_after >= span) return d;
  }
}

}  // namespace

TEST_CASE("conv on extended windows equals the single-device conv, forward and backward") {
  std::mt19937_64 rng(29);
  std::vector<Mesh> meshes = standard_meshes();
  for (int t = 0; t < 300; ++t) {
    const Mesh& mesh = meshes[static_cast<size_t>(uniform(rng, 0, 2))];
    std::vector<Layout> layouts;
    for (const Layout& l : all_layouts(mesh, 4, false)) {
      if (!l.is_sharded(3) && (l.is_sharded(1) || l.is_sharded(2))) layouts.push_back(l);
    }
    const Layout layout = layouts[static_cast<size_t>(uniform(rng, 0, layouts.size() - 1))];
    const Shape x_shape{uniform(rng, 1, 3), uniform(rng, 1, 13), uniform(rng, 1, 13),
                        uniform(rng, 1, 3)};
    Geometry g;
    g.h = random_dim(rng, x_shape[1], &g.pad.bottom);
    g.w = random_dim(rng, x_shape[2], &g.pad.right);
    g.pad.top = g.h.pad_before;
    g.pad.left = g.w.pad_before;
    const int64_t out_h = out_size(x_shape[1], g.pad.top, g.pad.bottom, g.h);
    const int64_t out_w = out_size(x_shape[2], g.pad.left, g.pad.right, g.w);
    INFO(shape_to_string(x_shape) << " " << layout.short_string() << " on " << mesh.dims_string()
                                  << " filter " << g.h.filter << "x" << g.w.filter << " stride "
                                  << g.h.stride << "," << g.w.stride << " dilation " << g.h.dilation
                                  << "," << g.w.dilation << " pad " << g.pad.top << ","
                                  << g.pad.bottom << "," << g.pad.left << "," << g.pad.right
                                  << " out " << out_h << "x" << out_w);
    Tensor x = integer_tensor(x_shape, DType::kF64, rng());
    Tensor w = integer_tensor({g.h.filter, g.w.filter, x_shape[3], 2}, DType::kF64, rng());
    Tensor y = direct_conv(x, w, g.h, g.w, g.pad);
    REQUIRE(y.shape() == Shape{x_shape[0], out_h, out_w, 2});
    Tensor dy = integer_tensor(y.shape(), DType::kF64, rng());
    Tensor dx = direct_conv_backprop_input(x_shape, w, dy, g.h, g.w, g.pad);

    DTensor xd = distribute(x, layout);
    HaloWindow2d window(layout, x_shape, out_h, out_w, g.h, g.w);
    REQUIRE(window.is_spatial());
    reset_collective_stats();
    std::vector<Tensor> ext = window.extend(xd.shards());
    const int64_t forward = collective_stats().count(CollectiveKind::kAllToAll);
    REQUIRE(forward <= (layout.is_sharded(1) ? 1 : 0) + (layout.is_sharded(2) ? 1 : 0));
    REQUIRE(collective_stats().total() == forward);

    std::vector<Tensor> dext(ext.size());
    for (size_t i = 0; i < ext.size(); ++i) {
      const int64_t id = mesh.local_device_ids()[i];
      const ShardRange batch = layout.shard_range(x_shape, 0, id);
      const HaloInterval rows = window.out_rows(i), cols = window.out_cols(i);
      INFO("local device " << i << " rows " << rows.begin << ".." << rows.end << " cols "
                           << cols.begin << ".." << cols.end);
      const std::vector<int64_t> at{batch.offset, rows.begin, cols.begin, 0};
      const Shape extent{batch.size, rows.size(), cols.size(), 2};
      Tensor local_dy = slice_box(dy, at, extent);
      if (rows.size() == 0 || cols.size() == 0 || batch.size == 0) {
        dext[i] = Tensor::zeros(ext[i].shape(), DType::kF64);
        continue;
      }
      const LocalPadding p = window.local_padding(i);
      Tensor local_y = direct_conv(ext[i], w, WindowDim{g.h.filter, g.h.stride, g.h.dilation, 0},
                                   WindowDim{g.w.filter, g.w.stride, g.w.dilation, 0}, p);
      REQUIRE(bitwise_equal(local_y, slice_box(y, at, extent)));
      dext[i] = direct_conv_backprop_input(ext[i].shape(), w, local_dy, g.h, g.w, p);
    }
    reset_collective_stats();
    std::vector<Tensor> back = window.extend_adjoint(dext);
    REQUIRE(collective_stats().count(CollectiveKind::kAllToAll) == forward);
    REQUIRE(collective_stats().total() == forward);
    REQUIRE(bitwise_equal(to_global(DTensor(x_shape, DType::kF64, layout, back)), dx));
  }
}
