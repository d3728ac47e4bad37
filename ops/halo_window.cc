#include "ops/halo_window.h"

#include <algorithm>

namespace dtensor {

HaloWindow2d::HaloWindow2d(const Layout& x_layout, const Shape& x_shape, int64_t out_h,
                           int64_t out_w, const WindowDim& h, const WindowDim& w)
    : mesh_(x_layout.mesh()),
      rows_(make_dim(x_layout, x_shape, 1, out_h, h)),
      cols_(make_dim(x_layout, x_shape, 2, out_w, w)) {}

HaloWindow2d::Dim HaloWindow2d::make_dim(const Layout& layout, const Shape& shape, int64_t axis,
                                         int64_t out, const WindowDim& d) const {
  Dim dim;
  const int64_t in = shape[static_cast<size_t>(axis)];
  dim.axis = HaloAxis{axis, in, layout.mesh_dim_of(axis)};
  if (dim.axis.mesh_dim < 0) {
    // One shard: the whole dim with the op's own padding, the single-device call.
    const int64_t span = (d.filter - 1) * d.dilation + 1;
    WindowShard whole;
    whole.out = {0, out};
    whole.in = {0, in};
    whole.pad_before = d.pad_before;
    whole.pad_after = std::max<int64_t>(0, (out - 1) * d.stride + span - in - d.pad_before);
    dim.windows.push_back(whole);
  } else {
    dim.windows = window_shards(in, out, layout.num_shards(axis), d.filter, d.stride, d.dilation,
                                d.pad_before);
  }
  dim.needed = window_inputs(dim.windows);
  return dim;
}

const WindowShard& HaloWindow2d::row(size_t i) const {
  if (rows_.axis.mesh_dim < 0) return rows_.windows[0];
  const int64_t c = mesh_.coord(mesh_.local_device_ids()[i], rows_.axis.mesh_dim);
  return rows_.windows[static_cast<size_t>(c)];
}

const WindowShard& HaloWindow2d::col(size_t i) const {
  if (cols_.axis.mesh_dim < 0) return cols_.windows[0];
  const int64_t c = mesh_.coord(mesh_.local_device_ids()[i], cols_.axis.mesh_dim);
  return cols_.windows[static_cast<size_t>(c)];
}

std::vector<Tensor> HaloWindow2d::extend(const std::vector<Tensor>& x_shards) const {
  std::vector<Tensor> h = halo_exchange(mesh_, x_shards, rows_.axis, rows_.needed);
  return halo_exchange(mesh_, h, cols_.axis, cols_.needed);
}

std::vector<Tensor> HaloWindow2d::extend_adjoint(const std::vector<Tensor>& pieces) const {
  std::vector<Tensor> w = halo_exchange_adjoint(mesh_, pieces, cols_.axis, cols_.needed);
  return halo_exchange_adjoint(mesh_, w, rows_.axis, rows_.needed);
}

LocalPadding HaloWindow2d::local_padding(size_t i) const {
  const WindowShard& r = row(i);
  const WindowShard& c = col(i);
  return LocalPadding{r.pad_before, r.pad_after, c.pad_before, c.pad_after};
}

}  // namespace dtensor
