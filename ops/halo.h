// Halo exchange: the communication under spatially sharded convolution and pooling.
//
// A tensor dim of size n is split along one mesh dim of size k with chunk semantics (shard c
// holds rows chunk_range(n, k, c)). A sliding window over that dim needs, on the device computing
// output chunk c, an interval of input rows that reaches into its neighbours' chunks: the halo.
// halo_exchange hands every device the interval it asks for (its own rows plus the ones others
// own), and halo_exchange_adjoint is its transpose for the backward pass: each device holds
// values for its interval, and every owner gets the sum of the values for its own rows.
//
// Intervals are given per shard index c along the mesh dim (every device with coordinate c gets
// needed[c]), so every process knows what every device sends and receives: each exchange is ONE
// all-to-all over the groups along that mesh dim (dtensor/collectives.h, so every backend works
// and CollectiveStats counts it once). Member i sends member j the rows of chunk_i ∩ needed[j],
// padded to the largest such piece between distinct members; a device's own rows never travel.
// When no device needs another's rows (a 1x1 window, say) nothing is sent at all. The intervals
// may be arbitrary: a halo spanning several shards and empty shards are handled the same way.
//
// Windows: window_shards gives, for a conv or pooling window along one dim, each output chunk's
// input interval clipped to the tensor and the zero padding left at the global edges.
//
// Stateless, thread-safe; host and device tensors alike (the copies go through runtime/block.h).
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor {

// Rows [begin, end) of one tensor dim.
struct HaloInterval {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  friend bool operator==(const HaloInterval& a, const HaloInterval& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// Tensor dim `axis` of global size `size`, split with chunk semantics along mesh dim index
// `mesh_dim` (-1: not split, one shard).
struct HaloAxis {
  int64_t axis = 0;
  int64_t size = 0;
  int64_t mesh_dim = -1;
};

// For each local device of `mesh` (local order), rows needed[c] along `a.axis` of the global
// tensor whose chunks along that dim `shards` hold (c: the device's coordinate along a.mesh_dim);
// the other dims are the device's shard's. `needed` has one interval per shard, inside
// [0, a.size). Throws InvalidArgumentError / ShapeError naming "halo_exchange".
std::vector<Tensor> halo_exchange(const Mesh& mesh, const std::vector<Tensor>& shards,
                                  const HaloAxis& a, const std::vector<HaloInterval>& needed);

// The adjoint: `pieces[i]` (local device i, coordinate c) holds values for rows needed[c]; returns
// per local device its chunk along `a.axis` holding the sum, over the devices of its group along
// a.mesh_dim, of their values for those rows (zero where nobody has any). Errors name
// "halo_exchange_adjoint".
std::vector<Tensor> halo_exchange_adjoint(const Mesh& mesh, const std::vector<Tensor>& pieces,
                                          const HaloAxis& a,
                                          const std::vector<HaloInterval>& needed);

// The same on DTensors: `axis` of `x` (sharded or not, any other dims and partial terms, which
// pass through: the exchange is linear). Returns the local tensors of the intervals.
std::vector<Tensor> halo_exchange(const DTensor& x, int64_t axis,
                                  const std::vector<HaloInterval>& needed);
// The adjoint as a DTensor of `shape` in `layout` (each shard the sum for its rows).
DTensor halo_exchange_adjoint(const std::vector<Tensor>& pieces, const Shape& shape, DType dtype,
                              const Layout& layout, int64_t axis,
                              const std::vector<HaloInterval>& needed);

// One output chunk of a sliding window along one dim: output rows `out` (chunk semantics of the
// output size), the input rows `in` it reads, clipped to [0, input size), and the padding rows
// before and after `in` that lie outside the tensor (zeros for conv; ignored by pooling). A
// window over pad_before + in.size() + pad_after rows with no further padding gives exactly the
// output rows `out`; an empty output chunk reads nothing.
struct WindowShard {
  HaloInterval out;
  HaloInterval in;
  int64_t pad_before = 0;
  int64_t pad_after = 0;
};

// Output chunk c of `shards` needs input rows
//   [o0*stride - pad_before, (o1-1)*stride - pad_before + (filter-1)*dilation + 1)
// for its output rows [o0, o1). The arguments are the op's (already validated).
std::vector<WindowShard> window_shards(int64_t in_size, int64_t out_size, int64_t shards,
                                       int64_t filter, int64_t stride, int64_t dilation,
                                       int64_t pad_before);

// The `in` intervals of `windows`, the argument halo_exchange takes.
std::vector<HaloInterval> window_inputs(const std::vector<WindowShard>& windows);

}  // namespace dtensor
