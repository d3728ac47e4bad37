#include "ops/halo.h"

#include <algorithm>

#include "dtensor/collectives.h"
#include "runtime/block.h"

namespace dtensor {
namespace {

HaloInterval overlap(const ShardRange& chunk, const HaloInterval& interval) {
  HaloInterval o{std::max(chunk.offset, interval.begin),
                 std::min(chunk.offset + chunk.size, interval.end)};
  if (o.end < o.begin) o.end = o.begin;
  return o;
}

// The exchange along one axis, as every process sees it: the chunks, the intervals and the
// largest piece one member sends another (the padded piece size of the all-to-all).
struct Exchange {
  const Mesh& mesh;
  HaloAxis axis;
  const std::vector<HaloInterval>& needed;
  std::vector<ShardRange> chunks;
  int64_t piece = 0;

  // Shard index of local device `i`.
  int64_t coord(size_t i) const {
    if (axis.mesh_dim < 0) return 0;
    return mesh.coord(mesh.local_device_ids()[i], axis.mesh_dim);
  }
  int64_t num_shards() const { return static_cast<int64_t>(chunks.size()); }
  // `shape` with the exchanged axis set to `rows`, and a box corner at row `row`.
  Shape with_rows(Shape shape, int64_t rows) const {
    shape[static_cast<size_t>(axis.axis)] = rows;
    return shape;
  }
  std::vector<int64_t> at_row(int64_t rank, int64_t row) const {
    std::vector<int64_t> at(static_cast<size_t>(rank), 0);
    at[static_cast<size_t>(axis.axis)] = row;
    return at;
  }
};

Exchange plan_exchange(const Mesh& mesh, size_t num_tensors, const HaloAxis& a,
                       const std::vector<HaloInterval>& needed, const char* function) {
  if (static_cast<int64_t>(num_tensors) != mesh.num_local_devices()) {
    throw_error<InvalidArgumentError>(function,
                                      "got {} tensors for the {} local devices of mesh {}",
                                      num_tensors, mesh.num_local_devices(), mesh.dims_string());
  }
  if (a.mesh_dim < -1 || a.mesh_dim >= mesh.rank() || a.size < 0) {
    throw_error<InvalidArgumentError>(
        function, "dim {} of size {} cannot be split along mesh dim {} of mesh {}", a.axis, a.size,
        a.mesh_dim, mesh.dims_string());
  }
  const int64_t k = a.mesh_dim < 0 ? 1 : mesh.dims()[static_cast<size_t>(a.mesh_dim)].size;
  if (static_cast<int64_t>(needed.size()) != k) {
    throw_error<InvalidArgumentError>(function, "got {} intervals for the {} shards of dim {}",
                                      needed.size(), k, a.axis);
  }
  Exchange ex{mesh, a, needed, {}, 0};
  for (int64_t c = 0; c < k; ++c) {
    const HaloInterval& n = needed[static_cast<size_t>(c)];
    if (n.begin < 0 || n.end < n.begin || n.end > a.size) {
      throw_error<InvalidArgumentError>(
          function, "interval [{}, {}) of shard {} is not inside [0, {}) of dim {}", n.begin, n.end,
          c, a.size, a.axis);
    }
    ex.chunks.push_back(chunk_range(a.size, k, c));
  }
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      if (i == j) continue;
      ex.piece = std::max(
          ex.piece,
          overlap(ex.chunks[static_cast<size_t>(i)], needed[static_cast<size_t>(j)]).size());
    }
  }
  return ex;
}

// Throws unless local tensor `i` has `rows` rows along the exchanged axis.
void check_rows(const Exchange& ex, const Tensor& t, size_t i, int64_t rows, const char* what,
                const char* function) {
  if (t.rank() <= ex.axis.axis || ex.axis.axis < 0 || t.dim(ex.axis.axis) != rows) {
    throw_error<ShapeError>(function, "{} {} of local device {} should have {} rows along dim {}",
                            what, t.to_string(), i, rows, ex.axis.axis);
  }
}

// The all-to-all: send[i] holds at rows [j*piece, ...) what local device i sends member j (the
// caller filled it); returns what each local device received, member j's piece at j*piece.
std::vector<Tensor> exchange_pieces(const Exchange& ex, const std::vector<Tensor>& send) {
  const MeshDimMask dims = MeshDimMask{1} << ex.axis.mesh_dim;
  return all_to_all(ex.mesh, dims, send, ex.axis.axis, ex.axis.axis);
}

}  // namespace

std::vector<Tensor> halo_exchange(const Mesh& mesh, const std::vector<Tensor>& shards,
                                  const HaloAxis& a, const std::vector<HaloInterval>& needed) {
  const char* function = "halo_exchange";
  Exchange ex = plan_exchange(mesh, shards.size(), a, needed, function);
  for (size_t i = 0; i < shards.size(); ++i) {
    check_rows(ex, shards[i], i, ex.chunks[static_cast<size_t>(ex.coord(i))].size, "shard",
               function);
  }
  const int64_t k = ex.num_shards();
  std::vector<Tensor> received;
  if (ex.piece > 0) {
    std::vector<Tensor> send;
    send.reserve(shards.size());
    for (size_t i = 0; i < shards.size(); ++i) {
      const Tensor& shard = shards[i];
      const ShardRange& mine = ex.chunks[static_cast<size_t>(ex.coord(i))];
      Tensor buffer =
          Tensor::empty(ex.with_rows(shard.shape(), k * ex.piece), shard.dtype(), shard.device());
      for (int64_t j = 0; j < k; ++j) {
        if (j == ex.coord(i)) continue;
        HaloInterval part = overlap(mine, needed[static_cast<size_t>(j)]);
        if (part.size() == 0) continue;
        copy_box(shard, ex.at_row(shard.rank(), part.begin - mine.offset), buffer,
                 ex.at_row(shard.rank(), j * ex.piece), ex.with_rows(shard.shape(), part.size()));
      }
      send.push_back(std::move(buffer));
    }
    received = exchange_pieces(ex, send);
  }
  std::vector<Tensor> out;
  out.reserve(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const Tensor& shard = shards[i];
    const int64_t c = ex.coord(i);
    const ShardRange& mine = ex.chunks[static_cast<size_t>(c)];
    const HaloInterval& want = needed[static_cast<size_t>(c)];
    if (want.begin == mine.offset && want.size() == mine.size) {
      out.push_back(shard);  // exactly its own rows: no copy
      continue;
    }
    Tensor result =
        Tensor::empty(ex.with_rows(shard.shape(), want.size()), shard.dtype(), shard.device());
    for (int64_t j = 0; j < k; ++j) {
      const ShardRange& theirs = ex.chunks[static_cast<size_t>(j)];
      HaloInterval part = overlap(theirs, want);
      if (part.size() == 0) continue;
      const Shape extent = ex.with_rows(shard.shape(), part.size());
      const std::vector<int64_t> to = ex.at_row(shard.rank(), part.begin - want.begin);
      if (j == c) {
        copy_box(shard, ex.at_row(shard.rank(), part.begin - mine.offset), result, to, extent);
      } else {
        copy_box(received[i], ex.at_row(shard.rank(), j * ex.piece), result, to, extent);
      }
    }
    out.push_back(std::move(result));
  }
  return out;
}

std::vector<Tensor> halo_exchange_adjoint(const Mesh& mesh, const std::vector<Tensor>& pieces,
                                          const HaloAxis& a,
                                          const std::vector<HaloInterval>& needed) {
  const char* function = "halo_exchange_adjoint";
  Exchange ex = plan_exchange(mesh, pieces.size(), a, needed, function);
  for (size_t i = 0; i < pieces.size(); ++i) {
    check_rows(ex, pieces[i], i, needed[static_cast<size_t>(ex.coord(i))].size(), "piece",
               function);
  }
  const int64_t k = ex.num_shards();
  std::vector<Tensor> received;
  if (ex.piece > 0) {
    std::vector<Tensor> send;
    send.reserve(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Tensor& piece = pieces[i];
      const HaloInterval& have = needed[static_cast<size_t>(ex.coord(i))];
      Tensor buffer =
          Tensor::empty(ex.with_rows(piece.shape(), k * ex.piece), piece.dtype(), piece.device());
      for (int64_t j = 0; j < k; ++j) {
        if (j == ex.coord(i)) continue;
        HaloInterval part = overlap(ex.chunks[static_cast<size_t>(j)], have);
        if (part.size() == 0) continue;
        copy_box(piece, ex.at_row(piece.rank(), part.begin - have.begin), buffer,
                 ex.at_row(piece.rank(), j * ex.piece), ex.with_rows(piece.shape(), part.size()));
      }
      send.push_back(std::move(buffer));
    }
    received = exchange_pieces(ex, send);
  }
  std::vector<Tensor> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Tensor& piece = pieces[i];
    const int64_t c = ex.coord(i);
    const ShardRange& mine = ex.chunks[static_cast<size_t>(c)];
    const HaloInterval& have = needed[static_cast<size_t>(c)];
    if (have.begin == mine.offset && have.size() == mine.size && ex.piece == 0) {
      out.push_back(piece);  // its own rows exactly, and nobody else's: nothing to add
      continue;
    }
    Tensor result =
        Tensor::zeros(ex.with_rows(piece.shape(), mine.size), piece.dtype(), piece.device());
    HaloInterval own = overlap(mine, have);
    if (own.size() > 0) {
      copy_box(piece, ex.at_row(piece.rank(), own.begin - have.begin), result,
               ex.at_row(piece.rank(), own.begin - mine.offset),
               ex.with_rows(piece.shape(), own.size()));
    }
    // The others' values for these rows, in member order, added to the own ones.
    for (int64_t j = 0; j < k; ++j) {
      if (j == c) continue;
      HaloInterval part = overlap(mine, needed[static_cast<size_t>(j)]);
      if (part.size() == 0) continue;
      const Shape extent = ex.with_rows(piece.shape(), part.size());
      const std::vector<int64_t> at = ex.at_row(piece.rank(), part.begin - mine.offset);
      Tensor sum = slice_box(result, at, extent);
      reduce_into(sum, slice_box(received[i], ex.at_row(piece.rank(), j * ex.piece), extent),
                  ReduceOp::kSum);
      copy_box(sum, ex.at_row(piece.rank(), 0), result, at, extent);
    }
    out.push_back(std::move(result));
  }
  return out;
}

namespace {

HaloAxis halo_axis(const Layout& layout, const Shape& shape, int64_t axis, const char* function,
                   const std::string& operand) {
  axis =
      normalize_axis(axis, static_cast<int64_t>(shape.size()), function, [&] { return operand; });
  return HaloAxis{axis, shape[static_cast<size_t>(axis)], layout.mesh_dim_of(axis)};
}

}  // namespace

std::vector<Tensor> halo_exchange(const DTensor& x, int64_t axis,
                                  const std::vector<HaloInterval>& needed) {
  return halo_exchange(x.mesh(), x.shards(),
                       halo_axis(x.layout(), x.shape(), axis, "halo_exchange", x.short_string()),
                       needed);
}

DTensor halo_exchange_adjoint(const std::vector<Tensor>& pieces, const Shape& shape, DType dtype,
                              const Layout& layout, int64_t axis,
                              const std::vector<HaloInterval>& needed) {
  layout.check_shape(shape, "halo_exchange_adjoint");
  const HaloAxis a = halo_axis(layout, shape, axis, "halo_exchange_adjoint",
                               shape_to_string(shape) + " " + layout.short_string());
  for (const Tensor& p : pieces) {
    if (p.dtype() != dtype) {
      throw_error<DTypeError>("halo_exchange_adjoint", "piece {} is not {}", p.to_string(),
                              dtype_name(dtype));
    }
  }
  return DTensor(shape, dtype, layout, halo_exchange_adjoint(layout.mesh(), pieces, a, needed));
}

std::vector<WindowShard> window_shards(int64_t in_size, int64_t out_size, int64_t shards,
                                       int64_t filter, int64_t stride, int64_t dilation,
                                       int64_t pad_before) {
  std::vector<WindowShard> out;
  out.reserve(static_cast<size_t>(shards));
  const int64_t span = (filter - 1) * dilation + 1;
  for (int64_t c = 0; c < shards; ++c) {
    const ShardRange chunk = chunk_range(out_size, shards, c);
    WindowShard w;
    w.out = HaloInterval{chunk.offset, chunk.offset + chunk.size};
    if (chunk.size > 0) {
      const int64_t lo = chunk.offset * stride - pad_before;
      const int64_t hi = (chunk.offset + chunk.size - 1) * stride - pad_before + span;
      w.in.begin = std::min(in_size, std::max<int64_t>(0, lo));
      w.in.end = std::max(w.in.begin, std::min(in_size, hi));
      w.pad_before = w.in.begin - lo;
      w.pad_after = hi - w.in.end;
    }
    out.push_back(w);
  }
  return out;
}

std::vector<HaloInterval> window_inputs(const std::vector<WindowShard>& windows) {
  std::vector<HaloInterval> in;
  in.reserve(windows.size());
  for (const WindowShard& w : windows) in.push_back(w.in);
  return in;
}

}  // namespace dtensor
