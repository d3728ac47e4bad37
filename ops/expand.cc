#include "ops/expand.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "dtensor/collectives.h"
#include "dtensor/step_observer.h"
#include "kernels/kernels.h"
#include "runtime/block.h"
#include "runtime/thread_pool.h"

namespace dtensor {
namespace {

thread_local int blas_threads = 0;

// Below this much work per computation, waking the pool costs more than it saves.
constexpr double kParallelWork = 2e5;

}  // namespace

int local_blas_threads() {
  return blas_threads > 0 ? blas_threads : ThreadPool::global().num_threads();
}

namespace {

// Rows [begin, end) of dim 0 of `t`: a view, or a copy where a view would be misaligned.
Tensor leading_rows(const Tensor& t, int64_t begin, int64_t end) {
  if (std::optional<Tensor> view = t.leading_view(begin, end)) return std::move(*view);
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  std::vector<int64_t> from(shape.size(), 0);
  from[0] = begin;
  copy_box(t, from, out, std::vector<int64_t>(shape.size(), 0), shape);
  return out;
}

// The shards of `input` on local devices `devices`, concatenated along `axis` into one tensor;
// null when they do not all have that axis and equal other dims. A Stacking::kShared axis: the
// first device's shard (an operand every device holds alike). Shards of a CPU mesh that are
// adjacent rows, in order, of one buffer (an earlier row-stacked call's result) are that
// buffer's rows as they are, no copy.
std::optional<Tensor> concat_shards(const DTensor& input, const std::vector<size_t>& devices,
                                    int64_t axis) {
  const Tensor& first = input.shard(devices[0]);
  if (axis == Stacking::kShared) return first;
  if (axis >= first.rank()) return std::nullopt;
  Shape shape = first.shape();
  shape[static_cast<size_t>(axis)] = 0;
  for (size_t device : devices) {
    const Tensor& part = input.shard(device);
    Shape other = part.shape();
    if (part.dtype() != first.dtype() || other.size() != shape.size()) return std::nullopt;
    shape[static_cast<size_t>(axis)] += other[static_cast<size_t>(axis)];
    other[static_cast<size_t>(axis)] = 0;
    for (size_t d = 0; d < other.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && other[d] != shape[d]) return std::nullopt;
    }
  }
  if (axis == 0 && first.device().type == DeviceType::kCPU) {
    std::vector<const Tensor*> parts;
    for (size_t device : devices) parts.push_back(&input.shard(device));
    if (std::optional<Tensor> joined = Tensor::joined_view(parts, first.device())) return joined;
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> at(shape.size(), 0);
  for (size_t device : devices) {
    const Tensor& part = input.shard(device);
    copy_box(part, std::vector<int64_t>(shape.size(), 0), out, at, part.shape());
    at[static_cast<size_t>(axis)] += part.dim(axis);
  }
  return out;
}

// `t` as a tensor of `device`: the same buffer where the two share memory (CPU devices), else a
// copy through the device-neutral block copy (GPU devices: never one buffer for two devices).
Tensor on_device(const Tensor& t, const Device& device) {
  if (same_memory_space(t.device(), device)) return t.with_device(device);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const std::vector<int64_t> origin(t.shape().size(), 0);
  copy_box(t, origin, out, origin, t.shape());
  return out;
}

// True if local devices `a` and `b` hold the same logical shard of a tensor of `layout`: they
// differ only along mesh dims that the layout neither shards nor marks partial.
bool same_logical_shard(const Layout& layout, size_t a, size_t b) {
  const Mesh& mesh = layout.mesh();
  const MeshDimMask distinct = layout.sharded_mask() | layout.partial_mask();
  const int64_t id_a = mesh.local_device_ids()[a], id_b = mesh.local_device_ids()[b];
  for (int64_t d = 0; d < mesh.rank(); ++d) {
    if (((distinct >> d) & 1) != 0 && mesh.coord(id_a, d) != mesh.coord(id_b, d)) return false;
  }
  return true;
}

// Runs calls [0, n) of `call` inline, or on the pool with a share of the BLAS threads each when
// there is enough work to pay for waking it.
template <typename Call>
void run_calls(int64_t n, double work, const Call& call) {
  ThreadPool& pool = ThreadPool::global();
  const double work_each = work / static_cast<double>(std::max<int64_t>(n, 1));
  if (n > 1 && work_each >= kParallelWork && !ThreadPool::in_worker()) {
    const int threads = pool.num_threads();
    pool.parallel_for(n, [&](int64_t c) {
      blas_threads = std::max(1, threads / static_cast<int>(std::min<int64_t>(n, threads)));
      call(c);
      blas_threads = 0;
    });
  } else {
    for (int64_t c = 0; c < n; ++c) call(c);
  }
}

// Stacking::rows_of: the computations' rows of input `s` stacked into one call of `kernel`, the
// result split back by rows; false (nothing done) when the shapes do not allow it.
//
// Computations whose rows of `s` are the same logical shard (their devices differ only along mesh
// dims that s's layout neither shards nor marks partial: replicas, in distinct buffers after a
// relayout) are stacked once and share the result. A BLAS gives a row bits that depend on where
// the row sits in the call (OpenBLAS splits the rows unevenly over its threads, finishes each
// split with edge micro-kernels, and takes a small-matrix path below a size), so replicas stacked
// at different rows would differ in their last bits (issue 25); computed once, they are
// identical, and the call is no taller than the distinct rows.
//
// GPU meshes stack the same way when all computations run on one physical GPU (logical devices):
// the shared operands are then replicas in distinct buffers, which hold identical bits, so the
// first computation's are used; each result is a copy on its computation's own device. So batch=1
// and batch=N of one GPU make the same library call on the same rows (cuBLAS, like a CPU BLAS,
// picks its kernel by shape). Devices on several physical GPUs keep one call per device, so that
// each GPU computes its own rows.
bool run_row_stacked(const std::vector<const DTensor*>& inputs, size_t s,
                     const std::vector<size_t>& first_device, const LocalKernel& kernel,
                     std::vector<Tensor>& results) {
  const DTensor& stacked_input = *inputs[s];
  const bool on_cpu = stacked_input.mesh().device_type() == DeviceType::kCPU;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k == s) continue;
    const Tensor& shared = inputs[k]->shard(first_device[0]);
    for (size_t device : first_device) {
      const bool same = on_cpu ? inputs[k]->shard(device).is_same_as(shared)
                               : same_logical_shard(inputs[k]->layout(), device, first_device[0]);
      if (!same) return false;
    }
  }
  if (stacked_input.rank() != 2) return false;
  // The logical shard of each computation's rows. block_of[c]: the first computation with the
  // same shard.
  const Layout& layout = stacked_input.layout();
  std::vector<size_t> block_of(first_device.size());
  std::vector<size_t> blocks;  // the first computation of each logical shard, in order
  for (size_t c = 0; c < first_device.size(); ++c) {
    if (!on_cpu && !same_physical_gpu(stacked_input.shard(first_device[c]).device(),
                                      stacked_input.shard(first_device[0]).device())) {
      return false;
    }
    block_of[c] = c;
    for (size_t b : blocks) {
      if (same_logical_shard(layout, first_device[c], first_device[b])) {
        block_of[c] = b;
        break;
      }
    }
    if (block_of[c] == c) blocks.push_back(c);
  }
  if (blocks.size() == 1) {
    // One logical shard: a plain call on it (nothing to stack).
    std::vector<const Tensor*> shards(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) shards[k] = &inputs[k]->shard(first_device[0]);
    results[0] = kernel(Shards(shards.data()));
  } else {
    std::vector<size_t> block_devices;
    for (size_t b : blocks) block_devices.push_back(first_device[b]);
    std::optional<Tensor> stacked = concat_shards(stacked_input, block_devices, 0);
    if (!stacked) return false;
    std::vector<const Tensor*> shards(inputs.size());
    for (size_t k = 0; k < inputs.size(); ++k) {
      shards[k] = k == s ? &*stacked : &inputs[k]->shard(first_device[0]);
    }
    Tensor all = kernel(Shards(shards.data()));
    if (all.rank() != 2 || all.dim(0) != stacked->dim(0)) {
      throw_error<InternalError>("run_local", "a row-stacked kernel returned {} for {} rows",
                                 all.to_string(), stacked->dim(0));
    }
    // Each block's rows of `all`: on CPU meshes a view of them (a copy where a view would start
    // misaligned); views are never unique, so no copy-on-write writer ever writes through one
    // while other devices read the buffer. GPU meshes copy each block to its own device.
    int64_t row = 0;
    for (size_t b : blocks) {
      const Tensor& rows = stacked_input.shard(first_device[b]);
      if (on_cpu) {
        results[b] = leading_rows(all, row, row + rows.dim(0)).with_device(rows.device());
      } else {
        Tensor part = Tensor::empty({rows.dim(0), all.dim(1)}, all.dtype(), rows.device());
        copy_box(all, {row, 0}, part, {0, 0}, part.shape());
        results[b] = std::move(part);
      }
      row += rows.dim(0);
    }
  }
  for (size_t c = 0; c < first_device.size(); ++c) {
    if (block_of[c] != c) {
      results[c] = on_device(results[block_of[c]], stacked_input.shard(first_device[c]).device());
    }
  }
  return true;
}

// The local devices of one partial-sum group, and those among them whose term can be nonzero.
struct PartialGroup {
  std::vector<size_t> members;  // local indices, in group order
  std::vector<size_t> terms;    // the members whose term can be nonzero
};

// The groups of `output_layout`'s partial dims that have local members. The kernels are linear
// in every input: a shared-zeros operand makes a member's term zero.
std::vector<PartialGroup> partial_groups(const std::vector<const DTensor*>& inputs,
                                         const Layout& output_layout) {
  const Mesh& mesh = output_layout.mesh();
  std::vector<PartialGroup> groups;
  for (const std::vector<int64_t>& ids : mesh.groups(output_layout.partial_mask())) {
    PartialGroup g;
    for (int64_t id : ids) {
      if (mesh.is_local(id)) g.members.push_back(static_cast<size_t>(mesh.local_index(id)));
    }
    if (g.members.empty()) continue;
    for (size_t m : g.members) {
      bool zero = false;
      for (const DTensor* in : inputs) zero = zero || in->shard(m).is_shared_zeros();
      if (!zero) g.terms.push_back(m);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

// Stacking::contraction_axes: one call per partial group of local devices; fills `shards` (one
// per local device) and returns true, or returns false having done nothing.
bool run_contraction_stacked(const std::vector<const DTensor*>& inputs,
                             const std::vector<int64_t>& axes, const Layout& output_layout,
                             const Shape& output_shape, DType output_dtype, double work,
                             const LocalKernel& kernel, std::vector<Tensor>& shards) {
  if (inputs.empty() || axes.size() != inputs.size() || !output_layout.is_partial() ||
      ThreadPool::in_worker()) {
    return false;
  }
  for (const PartialDim& p : output_layout.partial()) {
    if (p.op != ReduceOp::kSum) return false;
  }
  const Mesh& mesh = output_layout.mesh();
  struct Group : PartialGroup {
    Tensor sum;
  };
  std::vector<Group> groups;
  bool merges = false;
  for (PartialGroup& p : partial_groups(inputs, output_layout)) {
    merges = merges || p.members.size() > 1;
    groups.push_back(Group{std::move(p), Tensor()});
  }
  if (!merges) return false;
  // Concatenate every input first: a shape that does not fit leaves everything to the plain path.
  std::vector<std::vector<Tensor>> args(groups.size());
  for (size_t c = 0; c < groups.size(); ++c) {
    const Group& g = groups[c];
    if (g.terms.empty()) continue;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (g.terms.size() == 1) {
        args[c].push_back(inputs[k]->shard(g.terms[0]));
        continue;
      }
      std::optional<Tensor> joined = concat_shards(*inputs[k], g.terms, axes[k]);
      if (!joined) return false;
      args[c].push_back(std::move(*joined));
    }
  }
  run_calls(static_cast<int64_t>(groups.size()), work, [&](int64_t c) {
    Group& g = groups[static_cast<size_t>(c)];
    if (g.terms.empty()) return;
    std::vector<const Tensor*> shard_ptrs;
    for (const Tensor& t : args[static_cast<size_t>(c)]) shard_ptrs.push_back(&t);
    g.sum = kernel(Shards(shard_ptrs.data()));
  });
  const auto& ids = mesh.local_device_ids();
  shards.assign(ids.size(), Tensor());
  for (const Group& g : groups) {
    const size_t holder = g.terms.empty() ? g.members[0] : g.terms[0];
    for (size_t m : g.members) {
      const Device device{mesh.device_type(), ids[m]};
      if (m == holder && !g.terms.empty()) {
        shards[m] = g.sum.with_device(device);
      } else {
        shards[m] = Tensor::shared_zeros(output_layout.shard_shape(output_shape, ids[m]),
                                         output_dtype, device);
      }
    }
  }
  return true;
}

// Sets this thread's BLAS budget for a scope (chunk calls run on one thread wherever they run).
class BlasThreadsScope {
 public:
  explicit BlasThreadsScope(int threads) : saved_(blas_threads) { blas_threads = threads; }
  ~BlasThreadsScope() { blas_threads = saved_; }
  BlasThreadsScope(const BlasThreadsScope&) = delete;
  BlasThreadsScope& operator=(const BlasThreadsScope&) = delete;

 private:
  int saved_;
};

// Entries [begin, end) of `t` along `axis`: leading_rows for axis 0, else a copy.
Tensor axis_slice(const Tensor& t, int64_t axis, int64_t begin, int64_t end) {
  if (axis == 0) return leading_rows(t, begin, end);
  Shape shape = t.shape();
  shape[static_cast<size_t>(axis)] = end - begin;
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  std::vector<int64_t> from(shape.size(), 0);
  from[static_cast<size_t>(axis)] = begin;
  copy_box(t, from, out, std::vector<int64_t>(shape.size(), 0), shape);
  return out;
}

// sum_in_order's additions for f32 and f64 parts on CPU devices (the deterministic mode runs it
// for every chunked sum); nullopt otherwise. Block by block, every part added into an f64
// accumulator that stays in L1 (not a whole f64 tensor read and written once per part), each
// element still 0 + p0 + p1 + ... in part order and rounded once, so the bits are the same. The
// full blocks' loops have a constant trip count, which -O2 vectorises.
constexpr int64_t kSumBlock = 512;

template <typename T, int64_t kLen>
void add_block_in_order(const std::vector<const T*>& parts, int64_t begin, int64_t len,
                        T* __restrict out) {
  const int64_t n = kLen > 0 ? kLen : len;
  double acc[kSumBlock];
  const T* __restrict first = parts[0] + begin;
  for (int64_t i = 0; i < n; ++i) acc[i] = 0.0 + static_cast<double>(first[i]);
  for (size_t k = 1; k < parts.size(); ++k) {
    const T* __restrict p = parts[k] + begin;
    for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(p[i]);
  }
  for (int64_t i = 0; i < n; ++i) out[begin + i] = static_cast<T>(acc[i]);
}

template <typename T>
Tensor host_sum(const std::vector<const Tensor*>& parts, const Device& device) {
  const int64_t n = parts[0]->num_elements();
  std::vector<const T*> data;
  for (const Tensor* part : parts) data.push_back(part->data<T>());
  Tensor out = Tensor::empty(parts[0]->shape(), parts[0]->dtype(), device);
  T* o = out.data<T>();
  int64_t begin = 0;
  for (; begin + kSumBlock <= n; begin += kSumBlock) {
    add_block_in_order<T, kSumBlock>(data, begin, kSumBlock, o);
  }
  if (begin < n) add_block_in_order<T, 0>(data, begin, n - begin, o);
  return out;
}

std::optional<Tensor> sum_in_order_on_host(const std::vector<const Tensor*>& parts,
                                           const Device& device) {
  const DType dtype = parts[0]->dtype();
  if (device.type != DeviceType::kCPU || (dtype != DType::kF32 && dtype != DType::kF64)) {
    return std::nullopt;
  }
  for (const Tensor* part : parts) {
    if (part->device().type != DeviceType::kCPU || part->dtype() != dtype ||
        part->shape() != parts[0]->shape()) {
      return std::nullopt;
    }
  }
  return dtype == DType::kF32 ? host_sum<float>(parts, device) : host_sum<double>(parts, device);
}

// The sum of `parts` (same shape and dtype), added in order in f64 from zero and rounded once
// (bf16 through f32), on `device`. Through the kernel front, so that GPU meshes add the same
// way as CPU meshes: a part on another device is copied there first.
Tensor sum_in_order(const std::vector<const Tensor*>& parts, const Device& device) {
  const Tensor& first = *parts[0];
  if (std::optional<Tensor> sum = sum_in_order_on_host(parts, device)) return std::move(*sum);
  Tensor acc = Tensor::zeros(first.shape(), DType::kF64, device);
  for (const Tensor* part : parts) {
    acc = kernels::binary(kernels::BinaryOp::kAdd, acc,
                          kernels::cast(on_device(*part, device), DType::kF64));
  }
  if (first.dtype() == DType::kF64) return acc;
  Tensor f32 = kernels::cast(acc, DType::kF32);
  return first.dtype() == DType::kF32 ? f32 : kernels::cast(f32, first.dtype());
}

// The extent of `input`'s dim `axis` on each device of `devices` (global ids), from its layout.
std::vector<int64_t> rows_by_device(const DTensor& input, int64_t axis,
                                    const std::vector<int64_t>& devices) {
  std::vector<int64_t> rows;
  for (int64_t id : devices) {
    rows.push_back(input.layout().shard_shape(input.shape(), id)[static_cast<size_t>(axis)]);
  }
  return rows;
}

// The deterministic mode's cross-process part of a chunked partial sum: a group whose members
// live in several processes can only fold in the one-process order if every process's rows start
// on a chunk boundary; throws "[op] ..." naming the split otherwise.
void check_process_chunks(const DTensor& input, int64_t axis, const std::vector<int64_t>& devices,
                          int64_t chunk, const char* op) {
  const Mesh& mesh = input.layout().mesh();
  const std::vector<int64_t> rows = rows_by_device(input, axis, devices);
  int64_t start = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const bool first_of_process =
        i > 0 && mesh.owner_process(devices[i]) != mesh.owner_process(devices[i - 1]);
    if (first_of_process && start % chunk != 0) {
      throw_error<ShapeError>(
          op,
          "the deterministic mode (DTENSOR_DETERMINISTIC=1) sums chunks of {} along dim {} "
          "across processes, but process {}'s part of {} starts at {} of the group (devices {}): "
          "split that dim so that every process holds whole chunks",
          chunk, axis, mesh.owner_process(devices[i]), input.short_string(), start,
          fmt::join(devices, ","));
    }
    start += rows[i];
  }
}

// The deterministic mode's fold across processes. Each local member gives its chunk values,
// flattened and stacked along a new dim 0, to an all-to-all over the partial dims that hands
// member j of a group of G piece j (chunk semantics) of the elements of every member's chunks, in
// group order: chunk 0 first. Member j adds its piece of all the chunks in order, as the
// one-process run adds whole chunks, and returns its piece in place, zeros elsewhere: the
// all-reduce that follows adds exact zeros to each element's one sum. Each process receives
// about 1/G of every chunk, not every chunk whole. `chunks_of[m]` lists local member m's chunk
// values; `positions[m]` is member m's position in its group of `group_size`.
std::vector<Tensor> fold_across_processes(const Layout& output_layout, const Shape& output_shape,
                                          DType output_dtype,
                                          const std::vector<std::vector<const Tensor*>>& chunks_of,
                                          const std::vector<int64_t>& positions,
                                          int64_t group_size) {
  const Mesh& mesh = output_layout.mesh();
  const auto& ids = mesh.local_device_ids();
  std::vector<Tensor> stacks(ids.size());
  for (size_t m = 0; m < ids.size(); ++m) {
    const int64_t n = num_elements(output_layout.shard_shape(output_shape, ids[m]));
    stacks[m] = Tensor::empty({static_cast<int64_t>(chunks_of[m].size()), n}, output_dtype,
                              Device{mesh.device_type(), ids[m]});
    auto* at = static_cast<char*>(stacks[m].raw_data());
    for (const Tensor* value : chunks_of[m]) {  // contiguous host tensors (kernel results)
      std::memcpy(at, value->raw_data(), value->nbytes());
      at += value->nbytes();
    }
  }
  const std::vector<Tensor> pieces = all_to_all(mesh, output_layout.partial_mask(), stacks,
                                                /*split_axis=*/1, /*concat_axis=*/0);
  std::vector<Tensor> shards(ids.size());
  for (size_t m = 0; m < ids.size(); ++m) {
    const Shape shape = output_layout.shard_shape(output_shape, ids[m]);
    const Device device{mesh.device_type(), ids[m]};
    const Tensor& piece = pieces[m];
    if (piece.dim(0) == 0 || piece.dim(1) == 0) {
      shards[m] = Tensor::shared_zeros(shape, output_dtype, device);
      continue;
    }
    std::vector<Tensor> rows;
    for (int64_t r = 0; r < piece.dim(0); ++r) rows.push_back(leading_rows(piece, r, r + 1));
    std::vector<const Tensor*> parts;
    for (const Tensor& r : rows) parts.push_back(&r);
    const Tensor sum = sum_in_order(parts, device);
    shards[m] = Tensor::zeros(shape, output_dtype, device);
    const ShardRange range = chunk_range(num_elements(shape), group_size, positions[m]);
    const size_t esize = dtype_size(output_dtype);
    std::memcpy(
        static_cast<char*>(shards[m].raw_data()) + range.offset * static_cast<int64_t>(esize),
        sum.raw_data(), sum.nbytes());
  }
  return shards;
}

// Stacking::chunk_rows: fills `shards` (one per local device) and returns true, or returns false
// having done nothing (the plain paths then run).
bool run_chunked_sum(const std::vector<const DTensor*>& inputs, const Stacking& stacking,
                     const Layout& output_layout, const Shape& output_shape, DType output_dtype,
                     double work, const LocalKernel& kernel, std::vector<Tensor>& shards) {
  if (inputs.empty() || stacking.contraction_axes.size() != inputs.size() ||
      !is_floating(output_dtype) || ThreadPool::in_worker()) {
    return false;
  }
  const std::vector<int64_t>& axes = stacking.contraction_axes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const bool shared = k > 0 && axes[k] == Stacking::kShared;
    if (!shared && (axes[k] < 0 || axes[k] >= inputs[k]->rank())) return false;
  }
  for (const PartialDim& p : output_layout.partial()) {
    if (p.op != ReduceOp::kSum) return false;
  }
  const Mesh& mesh = output_layout.mesh();
  const size_t num_local = static_cast<size_t>(mesh.num_local_devices());
  struct Group : PartialGroup {
    std::vector<std::vector<Tensor>> parts;  // per part: its inputs
    size_t first_chunk = 0, num_chunks = 0;
    Tensor sum;
  };
  std::vector<Group> groups;
  if (output_layout.is_partial()) {
    for (PartialGroup& p : partial_groups(inputs, output_layout)) {
      groups.push_back(Group{std::move(p), {}, 0, 0, Tensor()});
    }
  } else {
    // Whole sums: devices reading the same buffers compute once.
    for (size_t i = 0; i < num_local; ++i) {
      Group* same = nullptr;
      for (Group& g : groups) {
        bool all = true;
        for (const DTensor* in : inputs)
          all = all && in->shard(i).is_same_as(in->shard(g.terms[0]));
        if (all) same = &g;
      }
      if (same != nullptr) {
        same->members.push_back(i);
      } else {
        groups.push_back(Group{PartialGroup{{i}, {i}}, {}, 0, 0, Tensor()});
      }
    }
  }
  // Parts: each term's shards when every term but the last holds whole chunks, else the terms
  // put together. Everything is checked before any kernel runs.
  const int64_t chunk = stacking.chunk_rows;
  const bool across_processes =
      output_layout.is_partial() && mesh.num_processes() > 1 && deterministic_sums();
  std::vector<std::vector<int64_t>> global_groups;  // of `groups`, in the same order
  if (across_processes) {
    for (std::vector<int64_t>& ids : mesh.groups(output_layout.partial_mask())) {
      if (std::none_of(ids.begin(), ids.end(), [&](int64_t id) { return mesh.is_local(id); })) {
        continue;
      }
      check_process_chunks(*inputs[0], axes[0], ids, chunk, stacking.op);
      global_groups.push_back(std::move(ids));
    }
  }
  for (Group& g : groups) {
    bool aligned = true;
    for (size_t t = 0; t < g.terms.size(); ++t) {
      const int64_t rows = inputs[0]->shard(g.terms[t]).dim(axes[0]);
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (axes[k] != Stacking::kShared && inputs[k]->shard(g.terms[t]).dim(axes[k]) != rows) {
          return false;
        }
      }
      aligned = aligned && (t + 1 == g.terms.size() || rows % chunk == 0);
    }
    if (aligned || g.terms.size() == 1) {
      for (size_t m : g.terms) {
        std::vector<Tensor> part;
        for (const DTensor* in : inputs) part.push_back(in->shard(m));
        g.parts.push_back(std::move(part));
      }
      continue;
    }
    std::vector<Tensor> joined;
    for (size_t k = 0; k < inputs.size(); ++k) {
      std::optional<Tensor> all = concat_shards(*inputs[k], g.terms, axes[k]);
      if (!all) return false;
      joined.push_back(std::move(*all));
    }
    g.parts.push_back(std::move(joined));
  }
  // The holder of each group's sum gets it; the other members, shared zeros.
  auto place_sums = [&] {
    const auto& ids = mesh.local_device_ids();
    shards.assign(num_local, Tensor());
    for (const Group& g : groups) {
      const size_t holder = g.terms.empty() ? g.members[0] : g.terms[0];
      for (size_t m : g.members) {
        const Device device{mesh.device_type(), ids[m]};
        if (g.terms.empty() || (output_layout.is_partial() && m != holder)) {
          shards[m] = Tensor::shared_zeros(output_layout.shard_shape(output_shape, ids[m]),
                                           output_dtype, device);
        } else {
          shards[m] = g.sum.with_device(device);
        }
      }
    }
  };
  // A kernel that folds its chunks itself: one call per group on its parts put together (whole
  // chunks per term, or the terms already put together: the same chunks either way).
  if (stacking.fold_chunks && !across_processes && mesh.device_type() == DeviceType::kCPU) {
    std::vector<std::vector<Tensor>> args(groups.size());
    bool joined = true;
    for (size_t c = 0; c < groups.size() && joined; ++c) {
      const Group& g = groups[c];
      if (g.parts.size() == 1) args[c] = g.parts[0];
      for (size_t k = 0; k < inputs.size() && g.parts.size() > 1 && joined; ++k) {
        std::optional<Tensor> all = concat_shards(*inputs[k], g.terms, axes[k]);
        joined = all.has_value();
        if (joined) args[c].push_back(std::move(*all));
      }
    }
    if (joined) {
      run_calls(static_cast<int64_t>(groups.size()), work, [&](int64_t c) {
        const std::vector<Tensor>& arg = args[static_cast<size_t>(c)];
        if (arg.empty()) return;
        std::vector<const Tensor*> ptrs;
        for (const Tensor& t : arg) ptrs.push_back(&t);
        groups[static_cast<size_t>(c)].sum = stacking.fold_chunks(Shards(ptrs.data()));
      });
      place_sums();
      return true;
    }
  }
  // The chunks of every group, in order.
  std::vector<std::vector<Tensor>> chunk_args;
  std::vector<size_t> chunk_owner;  // the local member that gives each chunk
  for (Group& g : groups) {
    g.first_chunk = chunk_args.size();
    for (size_t p = 0; p < g.parts.size(); ++p) {
      const std::vector<Tensor>& part = g.parts[p];
      const int64_t rows = part[0].dim(axes[0]);
      // A part per term, or the terms put together: the first term gives all its chunks.
      const size_t owner = g.terms[g.parts.size() == g.terms.size() ? p : 0];
      for (int64_t begin = 0; begin < rows || (begin == 0 && rows == 0); begin += chunk) {
        const int64_t end = std::min(rows, begin + chunk);
        std::vector<Tensor> args;
        for (size_t k = 0; k < part.size(); ++k) {
          args.push_back(axes[k] == Stacking::kShared ? part[k]
                                                      : axis_slice(part[k], axes[k], begin, end));
        }
        chunk_args.push_back(std::move(args));
        chunk_owner.push_back(owner);
        if (rows == 0) break;
      }
    }
    g.num_chunks = chunk_args.size() - g.first_chunk;
  }
  std::vector<Tensor> values(chunk_args.size());
  auto run_chunk = [&](int64_t c) {
    BlasThreadsScope one(1);
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : chunk_args[static_cast<size_t>(c)]) ptrs.push_back(&t);
    values[static_cast<size_t>(c)] = kernel(Shards(ptrs.data()));
  };
  const int64_t n = static_cast<int64_t>(chunk_args.size());
  if (n > 1 && work / static_cast<double>(n) >= kParallelWork) {
    ThreadPool::global().parallel_for(n, run_chunk);
  } else {
    for (int64_t c = 0; c < n; ++c) run_chunk(c);
  }
  // The deterministic mode: groups that span processes fold every process's chunks in order.
  if (across_processes) {
    std::vector<std::vector<const Tensor*>> chunks_of(num_local);
    for (size_t c = 0; c < values.size(); ++c) chunks_of[chunk_owner[c]].push_back(&values[c]);
    std::vector<int64_t> positions(num_local, 0);
    for (const std::vector<int64_t>& ids : global_groups) {
      for (size_t p = 0; p < ids.size(); ++p) {
        if (mesh.is_local(ids[p])) positions[mesh.local_index(ids[p])] = static_cast<int64_t>(p);
      }
    }
    shards = fold_across_processes(output_layout, output_shape, output_dtype, chunks_of, positions,
                                   mesh.group_size(output_layout.partial_mask()));
    return true;
  }
  for (Group& g : groups) {
    if (g.num_chunks == 0) continue;
    if (g.num_chunks == 1) {
      g.sum = values[g.first_chunk];
      continue;
    }
    std::vector<const Tensor*> parts;
    for (size_t c = g.first_chunk; c < g.first_chunk + g.num_chunks; ++c) {
      parts.push_back(&values[c]);
    }
    // On the holder's device (below): the first term's.
    g.sum = sum_in_order(parts, values[g.first_chunk].device());
  }
  place_sums();
  return true;
}

}  // namespace

bool deterministic_sums() {
  static const bool on = [] {
    const char* v = std::getenv("DTENSOR_DETERMINISTIC");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

int64_t invariant_chunk_rows(int64_t extent, double work, double small_work) {
  constexpr int64_t kChunks = 8;
  if (extent <= 0 || (work < small_work && !deterministic_sums())) {
    return std::max<int64_t>(extent, 1);
  }
  return (extent + kChunks - 1) / kChunks;
}

DTensor run_local(const std::vector<const DTensor*>& inputs, const Layout& output_layout,
                  const Shape& output_shape, DType output_dtype, double work,
                  const LocalKernel& kernel, Stacking stacking) {
  // Traced: the recorder keeps a copy of the kernel (kernels capture by value) and every
  // argument; the replay makes the same grouping, stacking and threading decisions on the shards
  // it then has, so it gives eager's bits.
  if (StepObserver* hook = StepObserver::active()) {
    return hook->call("run_local", inputs,
                      [output_layout, output_shape, output_dtype, work, kernel,
                       stacking](const StepObserver::Inputs& in) {
                        return run_local(in, output_layout, output_shape, output_dtype, work,
                                         kernel, stacking);
                      });
  }
  const Mesh& mesh = output_layout.mesh();
  std::vector<Tensor> shards;
  if (stacking.chunk_rows > 0 && run_chunked_sum(inputs, stacking, output_layout, output_shape,
                                                 output_dtype, work, kernel, shards)) {
    return DTensor::from_trusted_shards(output_shape, output_dtype, output_layout,
                                        std::move(shards));
  }
  if (!stacking.contraction_axes.empty() &&
      run_contraction_stacked(inputs, stacking.contraction_axes, output_layout, output_shape,
                              output_dtype, work, kernel, shards)) {
    return DTensor::from_trusted_shards(output_shape, output_dtype, output_layout,
                                        std::move(shards));
  }
  const size_t num_local = static_cast<size_t>(mesh.num_local_devices());
  // Group devices by the buffers they read: one computation per distinct set. A linear scan:
  // there are few local devices and this runs on every op.
  std::vector<size_t> computation_of(num_local);
  std::vector<size_t> first_device;
  first_device.reserve(num_local);
  for (size_t i = 0; i < num_local; ++i) {
    size_t c = 0;
    for (; c < first_device.size(); ++c) {
      bool same = true;
      for (const DTensor* in : inputs) {
        same = same && in->shard(i).is_same_as(in->shard(first_device[c]));
      }
      if (same) break;
    }
    if (c == first_device.size()) first_device.push_back(i);
    computation_of[i] = c;
  }
  // A device with no inputs (or with only empty shards) still computes its own result.
  if (inputs.empty()) {
    first_device.clear();
    for (size_t i = 0; i < num_local; ++i) {
      computation_of[i] = i;
      first_device.push_back(i);
    }
  }
  std::vector<Tensor> results(first_device.size());
  auto compute = [&](int64_t c) {
    const size_t device = first_device[static_cast<size_t>(c)];
    constexpr size_t kInline = 8;
    const Tensor* inline_shards[kInline];
    std::vector<const Tensor*> many;
    const Tensor** shard_ptrs = inline_shards;
    if (inputs.size() > kInline) {
      many.resize(inputs.size());
      shard_ptrs = many.data();
    }
    for (size_t k = 0; k < inputs.size(); ++k) shard_ptrs[k] = &inputs[k]->shard(device);
    results[static_cast<size_t>(c)] = kernel(Shards(shard_ptrs));
  };
  const int64_t n = static_cast<int64_t>(first_device.size());
  if (stacking.rows_of < 0 || n <= 1 || ThreadPool::in_worker() ||
      !run_row_stacked(inputs, static_cast<size_t>(stacking.rows_of), first_device, kernel,
                       results)) {
    run_calls(n, work, compute);
  }
  shards.reserve(num_local);
  const auto& ids = mesh.local_device_ids();
  for (size_t i = 0; i < num_local; ++i) {
    const Tensor& r = results[computation_of[i]];
    shards.push_back(r.device().id == ids[i] ? r
                                             : r.with_device(Device{mesh.device_type(), ids[i]}));
  }
  return DTensor::from_trusted_shards(output_shape, output_dtype, output_layout, std::move(shards));
}

}  // namespace dtensor
