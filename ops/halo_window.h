// HaloWindow2d: the halo exchanges of a 2-d sliding-window op (conv2d, pooling) on an NHWC
// tensor whose H and/or W dims are sharded.
//
// The output keeps the input's spatial sharding with chunk semantics of the OUTPUT size: the
// device at coordinate c along H's mesh dim computes output rows chunk_range(out_h, k, c). Its
// window of input rows (ops/halo.h window_shards) reaches into its neighbours' chunks; `extend`
// fetches it, H first and then W on the H-extended tensors (so the corners come along), one
// halo exchange per sharded dim. The local kernel then runs on the extended window with the
// padding of local_padding: the op's zero padding where the window leaves the tensor, none
// elsewhere. `extend_adjoint` sends a gradient of the extended windows back to the owners, W
// first and then H, summing the halos into their rows: again one exchange per sharded dim.
//
// An unsharded spatial dim is one shard: no exchange, the window is the whole dim with the op's
// padding. An immutable value built per op call; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/halo.h"

namespace dtensor {

// One spatial dim of the window: filter taps, stride, dilation, padding before the first row.
struct WindowDim {
  int64_t filter = 1;
  int64_t stride = 1;
  int64_t dilation = 1;
  int64_t pad_before = 0;
};

// The padding of one device's local kernel call on its extended window.
struct LocalPadding {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
};

class HaloWindow2d {
 public:
  // `x_layout` and `x_shape` are the NHWC input's (rank 4; H = dim 1, W = dim 2); out_h and
  // out_w are the op's output size; the arguments are the op's, already validated.
  HaloWindow2d(const Layout& x_layout, const Shape& x_shape, int64_t out_h, int64_t out_w,
               const WindowDim& h, const WindowDim& w);

  // Whether H or W is sharded (otherwise the op needs no exchange).
  bool is_spatial() const { return rows_.axis.mesh_dim >= 0 || cols_.axis.mesh_dim >= 0; }

  // Per local device, its extended window of `x_shards` (x's local shards).
  std::vector<Tensor> extend(const std::vector<Tensor>& x_shards) const;
  // Per local device, its shard of the sum of every device's `pieces` (gradients of the extended
  // windows, in their shapes).
  std::vector<Tensor> extend_adjoint(const std::vector<Tensor>& pieces) const;

  // Local device i's kernel padding, and its output rows and columns.
  LocalPadding local_padding(size_t i) const;
  HaloInterval out_rows(size_t i) const { return row(i).out; }
  HaloInterval out_cols(size_t i) const { return col(i).out; }
  // Local device i's extended window: its input rows and columns, and its shape for `batch`
  // images of `channels` channels.
  HaloInterval in_rows(size_t i) const { return row(i).in; }
  HaloInterval in_cols(size_t i) const { return col(i).in; }
  Shape extended_shape(size_t i, int64_t batch, int64_t channels) const {
    return {batch, in_rows(i).size(), in_cols(i).size(), channels};
  }

 private:
  struct Dim {
    HaloAxis axis;
    std::vector<WindowShard> windows;
    std::vector<HaloInterval> needed;
  };
  Dim make_dim(const Layout& layout, const Shape& shape, int64_t axis, int64_t out,
               const WindowDim& d) const;
  const WindowShard& row(size_t i) const;
  const WindowShard& col(size_t i) const;

  Mesh mesh_;
  Dim rows_, cols_;
};

}  // namespace dtensor
