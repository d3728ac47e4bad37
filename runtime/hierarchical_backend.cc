#include "runtime/hierarchical_backend.h"

#include <algorithm>
#include <functional>
#include <string>

#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/element_loops.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

// The processes of a group, in the order of their first member, and the group positions of the
// members each one owns.
struct ProcessView {
  std::vector<int64_t> processes;
  std::vector<std::vector<int64_t>> members;
  size_t self = 0;  // index of this process in `processes`

  size_t size() const { return processes.size(); }
  bool single() const { return processes.size() == 1; }
  bool flat() const {
    for (const auto& m : members) {
      if (m.size() != 1) return false;
    }
    return true;
  }
  const std::vector<int64_t>& local_members() const { return members[self]; }
};

ProcessView view_of(const Group& group) {
  ProcessView view;
  for (int64_t i = 0; i < group.size(); ++i) {
    const int64_t owner = group.owners[static_cast<size_t>(i)];
    auto it = std::find(view.processes.begin(), view.processes.end(), owner);
    const size_t p = static_cast<size_t>(it - view.processes.begin());
    if (it == view.processes.end()) {
      view.processes.push_back(owner);
      view.members.emplace_back();
    }
    view.members[p].push_back(i);
    if (owner == group.self) view.self = p;
  }
  return view;
}

// True when the processes, in view order, own consecutive runs of group positions (always so for
// mesh groups, whose processes own contiguous blocks of ids): a process's chunks then follow each
// other along a split axis.
bool members_in_process_order(const ProcessView& view) {
  int64_t next = 0;
  for (const std::vector<int64_t>& members : view.members) {
    for (int64_t j : members) {
      if (j != next++) return false;
    }
  }
  return true;
}

// The members at `positions`, presented as a group owned entirely by this process.
Group owned_here(const Group& group, const std::vector<int64_t>& positions) {
  Group out{{}, {}, group.self};
  for (int64_t p : positions) {
    out.devices.push_back(group.devices[static_cast<size_t>(p)]);
    out.owners.push_back(group.self);
  }
  return out;
}

// One representative member per process (its first), for the flat inter-process stage.
Group leaders(const Group& group, const ProcessView& view) {
  Group out{{}, {}, group.self};
  for (size_t p = 0; p < view.size(); ++p) {
    out.devices.push_back(group.devices[static_cast<size_t>(view.members[p].front())]);
    out.owners.push_back(view.processes[p]);
  }
  return out;
}

// Product of the dims before `axis`: 1 when chunks along `axis` are contiguous in memory.
int64_t leading_extent(const Tensor& t, int64_t axis) {
  int64_t n = 1;
  for (int64_t d = 0; d < axis; ++d) n *= t.dim(d);
  return n;
}

Shape with_dim(Shape shape, int64_t axis, int64_t size) {
  shape[static_cast<size_t>(axis)] = size;
  return shape;
}

std::vector<int64_t> at_dim(size_t rank, int64_t axis, int64_t offset) {
  std::vector<int64_t> begin(rank, 0);
  begin[static_cast<size_t>(axis)] = offset;
  return begin;
}

// `t` on `device`: the same buffer retagged where the device reads t's memory (the CPU devices of
// a process), else a copy in the device's own memory (a GPU each). Every move here goes through
// the device-neutral block copies, so no host code touches device memory.
Tensor moved_to(const Tensor& t, const Device& device) {
  if (same_memory_space(t.device(), device)) return t.with_device(device);
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const std::vector<int64_t> origin(t.shape().size(), 0);
  copy_box(t, origin, out, origin, t.shape());
  return out;
}

// The box `extent` at `begin` of `src`, on `device` (see moved_to).
Tensor slice_to(const Tensor& src, const std::vector<int64_t>& begin, const Shape& extent,
                const Device& device) {
  if (same_memory_space(src.device(), device)) {
    return slice_box(src, begin, extent).with_device(device);
  }
  Tensor out = Tensor::empty(extent, src.dtype(), device);
  copy_box(src, begin, out, std::vector<int64_t>(extent.size(), 0), extent);
  return out;
}

// One result for every local member, each on its member's device: shared by CPU devices, one
// buffer per GPU, so that a process may own several GPUs of a mesh spanning processes.
std::vector<Tensor> result_per_member(const Tensor& result, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& in : inputs) out.push_back(moved_to(result, in.device()));
  return out;
}

// Elements [at, at + n) of the flat tensor `from` (rank 1), as a new tensor of `shape` on
// from's device.
Tensor unpacked(const Tensor& from, int64_t at, const Shape& shape) {
  const int64_t n = num_elements(shape);
  Tensor flat = Tensor::empty({n}, from.dtype(), from.device());
  copy_box(from, {at}, flat, {0}, {n});
  return flat.reshaped(shape);
}

// The across-process stage of a bucket in flight; its results shared by the local members.
class SharedWhenDone final : public PendingCollective {
 public:
  SharedWhenDone(std::unique_ptr<PendingCollective> across, std::vector<std::vector<Tensor>> inputs)
      : across_(std::move(across)), inputs_(std::move(inputs)) {}
  bool test() override { return across_->test(); }
  std::vector<std::vector<Tensor>> wait() override {
    std::vector<std::vector<Tensor>> sums = across_->wait();
    std::vector<std::vector<Tensor>> out;
    out.reserve(sums.size());
    for (size_t t = 0; t < sums.size(); ++t) {
      out.push_back(result_per_member(sums[t][0], inputs_[t]));
    }
    return out;
  }

 private:
  std::unique_ptr<PendingCollective> across_;
  std::vector<std::vector<Tensor>> inputs_;  // the local members' tensors (for their devices)
};

class HierarchicalBackend final : public CollectiveBackend {
 public:
  HierarchicalBackend(std::shared_ptr<CollectiveBackend> intra,
                      std::shared_ptr<CollectiveBackend> inter)
      : intra_(std::move(intra)),
        inter_(std::move(inter)),
        name_("hierarchical(" + std::string(intra_->name()) + ", " + std::string(inter_->name()) +
              ")") {}

  std::string_view name() const override { return name_; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->all_reduce(group, inputs, op);
    if (view.flat()) return inter_->all_reduce(group, inputs, op);
    return result_per_member(reduce_across(group, view, inputs, op), inputs);
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->all_gather(group, inputs, axis);
    if (view.flat()) return inter_->all_gather(group, inputs, axis);
    if (members_in_process_order(view)) {
      // Each process's members form one run of the result: concatenate locally, then once
      // across processes.
      Tensor block =
          inputs.size() == 1
              ? inputs[0]
              : intra_->all_gather(owned_here(group, view.local_members()), inputs, axis)[0];
      return result_per_member(inter_->all_gather(leaders(group, view), {block}, axis)[0],
                               inputs);
    }
    return result_per_member(gather_members(group, view, inputs, axis), inputs);
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->reduce_scatter(group, inputs, op, axis);
    if (view.flat()) return inter_->reduce_scatter(group, inputs, op, axis);
    if (leading_extent(inputs[0], axis) == 1 && members_in_process_order(view)) {
      return reduce_scatter_blocks(group, view, inputs, op, axis);
    }
    // General case: the whole reduction, then each member's chunk.
    Tensor reduced = reduce_across(group, view, inputs, op);
    const std::vector<int64_t>& mine = view.local_members();
    std::vector<Tensor> out;
    for (size_t i = 0; i < mine.size(); ++i) {
      ShardRange r = chunk_range(reduced.dim(axis), group.size(), mine[i]);
      out.push_back(slice_to(reduced, at_dim(static_cast<size_t>(reduced.rank()), axis, r.offset),
                             with_dim(reduced.shape(), axis, r.size), inputs[i].device()));
    }
    return out;
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->all_to_all(group, inputs, split_axis, concat_axis);
    if (view.flat()) return inter_->all_to_all(group, inputs, split_axis, concat_axis);
    return all_to_all_packed(group, view, inputs, split_axis, concat_axis);
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->broadcast(group, inputs, root);
    if (view.flat()) return inter_->broadcast(group, inputs, root);
    const int64_t root_owner = group.owners[static_cast<size_t>(root)];
    const size_t root_process =
        static_cast<size_t>(std::find(view.processes.begin(), view.processes.end(), root_owner) -
                            view.processes.begin());
    // Non-root processes pass a tensor of their own; the inter backend sends the root's.
    Tensor source = inputs[0];
    if (root_process == view.self) {
      const std::vector<int64_t>& mine = view.local_members();
      source =
          inputs[static_cast<size_t>(std::find(mine.begin(), mine.end(), root) - mine.begin())];
    }
    Tensor result =
        inter_->broadcast(leaders(group, view), {source}, static_cast<int64_t>(root_process))[0];
    return result_per_member(result, inputs);
  }

  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->all_reduce_start(group, inputs, op);
    if (view.flat()) return inter_->all_reduce_start(group, inputs, op);
    // As all_reduce: each tensor reduced over the local members now (the same reduction), then
    // one bucket across processes, shared by the local members when it is done.
    std::vector<std::vector<Tensor>> sums;
    sums.reserve(inputs.size());
    for (const std::vector<Tensor>& members : inputs) {
      sums.push_back({reduce_local(group, view, members, op)});
    }
    return std::make_unique<SharedWhenDone>(
        inter_->all_reduce_start(leaders(group, view), sums, op), inputs);
  }

  void barrier(const Group& group) override {
    ProcessView view = view_of(group);
    if (view.single()) return intra_->barrier(group);
    if (view.flat()) return inter_->barrier(group);
    intra_->barrier(owned_here(group, view.local_members()));
    inter_->barrier(leaders(group, view));
  }

 private:
  // The reduction over this process's members.
  Tensor reduce_local(const Group& group, const ProcessView& view,
                      const std::vector<Tensor>& inputs, ReduceOp op) {
    if (inputs.size() == 1) return inputs[0];
    return intra_->all_reduce(owned_here(group, view.local_members()), inputs, op)[0];
  }

  // The reduction over every member: local members first, then across the processes.
  Tensor reduce_across(const Group& group, const ProcessView& view,
                       const std::vector<Tensor>& inputs, ReduceOp op) {
    Tensor mine = reduce_local(group, view, inputs, op);
    return inter_->all_reduce(leaders(group, view), {mine}, op)[0];
  }

  // Reduce-scatter when each process's chunks form one contiguous block of memory: local
  // reduction, then a flat reduce-scatter delivers each process only its block. The flat one
  // splits in equal chunks (one per process), so uneven blocks are first laid out in slots of
  // the largest block's size.
  std::vector<Tensor> reduce_scatter_blocks(const Group& group, const ProcessView& view,
                                            const std::vector<Tensor>& inputs, ReduceOp op,
                                            int64_t axis) {
    Tensor mine = reduce_local(group, view, inputs, op);
    const int64_t k = group.size();
    const int64_t n = mine.dim(axis);
    const int64_t num_processes = static_cast<int64_t>(view.size());
    std::vector<ShardRange> blocks;
    int64_t largest = 0;
    bool aligned = true;  // every block is the flat chunk of its process
    for (size_t p = 0; p < view.size(); ++p) {
      ShardRange block{chunk_range(n, k, view.members[p].front()).offset, 0};
      for (int64_t j : view.members[p]) block.size += chunk_range(n, k, j).size;
      ShardRange flat = chunk_range(n, num_processes, static_cast<int64_t>(p));
      aligned = aligned && flat.offset == block.offset && flat.size == block.size;
      largest = std::max(largest, block.size);
      blocks.push_back(block);
    }
    const size_t rank = static_cast<size_t>(mine.rank());
    Tensor send = mine;
    if (!aligned) {
      send = Tensor::zeros(with_dim(mine.shape(), axis, num_processes * largest), mine.dtype(),
                           mine.device());
      for (size_t p = 0; p < blocks.size(); ++p) {
        copy_box(mine, at_dim(rank, axis, blocks[p].offset), send,
                 at_dim(rank, axis, static_cast<int64_t>(p) * largest),
                 with_dim(mine.shape(), axis, blocks[p].size));
      }
    }
    Tensor block = inter_->reduce_scatter(leaders(group, view), {send}, op, axis)[0];
    const std::vector<int64_t>& local = view.local_members();
    const int64_t first_row = blocks[view.self].offset;
    std::vector<Tensor> out;
    for (size_t i = 0; i < local.size(); ++i) {
      ShardRange r = chunk_range(n, k, local[i]);
      if (local.size() == 1 && block.dim(axis) == r.size) {
        out.push_back(moved_to(block, inputs[i].device()));
        continue;
      }
      out.push_back(slice_to(block, at_dim(rank, axis, r.offset - first_row),
                             with_dim(mine.shape(), axis, r.size), inputs[i].device()));
    }
    return out;
  }

  // The shape of every member's tensor, in group order: one all-gather of each member's dtype,
  // rank and dims. The members must agree on the call (`describe` gives a member's descriptor from
  // its dtype and shape): the flat backend only sees the packed bytes, so a disagreement throws
  // CommunicationError here, on every process, before any data moves.
  std::vector<Shape> member_shapes(
      const Group& group, const ProcessView& view, const std::vector<Tensor>& inputs,
      const char* function,
      const std::function<CollectiveDescriptor(DType, const Shape&)>& describe) {
    std::vector<int64_t> records;
    for (const Tensor& in : inputs) {
      records.push_back(static_cast<int64_t>(in.dtype()));
      records.push_back(in.rank());
      records.insert(records.end(), in.shape().begin(), in.shape().end());
    }
    // Written and read on the host; on a GPU they travel in the first member's memory.
    Tensor mine = Tensor::empty({static_cast<int64_t>(records.size())}, DType::kI64);
    std::copy(records.begin(), records.end(), mine.data<int64_t>());
    const Tensor all = kernels::host_readable(inter_->all_gather(
        leaders(group, view), {kernels::on_device(mine, inputs[0].device())}, 0)[0]);
    const int64_t* a = all.data<int64_t>();
    const int64_t* end = a + all.num_elements();
    std::vector<Shape> shapes(static_cast<size_t>(group.size()));
    std::vector<CollectiveDescriptor> described(shapes.size());
    for (size_t p = 0; p < view.size(); ++p) {
      for (int64_t pos : view.members[p]) {
        DTENSOR_CHECK(end - a >= 2 && a[1] >= 0 && end - a >= 2 + a[1]);
        const DType dtype = static_cast<DType>(a[0]);
        shapes[static_cast<size_t>(pos)].assign(a + 2, a + 2 + a[1]);
        a += 2 + a[1];
        described[static_cast<size_t>(pos)] = describe(dtype, shapes[static_cast<size_t>(pos)]);
      }
    }
    check_agreement(function, described, group.owners,
                    static_cast<size_t>(view.local_members().front()));
    return shapes;
  }

  // The all-gather of every member's tensor along `axis`, on this process's first member's device:
  // the shapes, then the elements (packed flat in group order per process), each gathered once
  // across processes.
  Tensor gather_members(const Group& group, const ProcessView& view,
                        const std::vector<Tensor>& inputs, int64_t axis) {
    std::vector<Shape> shapes =
        member_shapes(group, view, inputs, "all_gather", [axis](DType dtype, const Shape& shape) {
          return describe_all_gather(dtype, shape, axis);
        });
    const Tensor& first = inputs[0];
    int64_t own = 0;
    for (const Tensor& in : inputs) own += in.num_elements();
    Tensor packed = Tensor::empty({own}, first.dtype(), first.device());
    int64_t at = 0;
    for (const Tensor& in : inputs) {
      copy_box(in.reshaped({in.num_elements()}), {0}, packed, {at}, {in.num_elements()});
      at += in.num_elements();
    }
    Tensor received = inter_->all_gather(leaders(group, view), {packed}, 0)[0];
    int64_t total = 0;
    for (const Shape& shape : shapes) total += shape[static_cast<size_t>(axis)];
    Tensor out = Tensor::empty(with_dim(shapes[0], axis, total), first.dtype(), first.device());
    std::vector<int64_t> offset_of(shapes.size());  // each member's offset along `axis`
    for (size_t pos = 0, offset = 0; pos < shapes.size(); ++pos) {
      offset_of[pos] = static_cast<int64_t>(offset);
      offset += static_cast<size_t>(shapes[pos][static_cast<size_t>(axis)]);
    }
    const size_t rank = shapes[0].size();
    at = 0;
    for (size_t p = 0; p < view.size(); ++p) {
      for (size_t i = 0; i < view.members[p].size(); ++i) {
        const size_t pos = static_cast<size_t>(view.members[p][i]);
        const Tensor piece = p == view.self ? inputs[i] : unpacked(received, at, shapes[pos]);
        copy_box(piece, std::vector<int64_t>(rank, 0), out, at_dim(rank, axis, offset_of[pos]),
                 shapes[pos]);
        at += num_elements(shapes[pos]);
      }
    }
    return out;
  }

  // All-to-all with several members per process: after the shapes are known everywhere, each
  // process packs, for every destination process, the pieces its members send to that process's
  // members into one row of a tensor [processes, widest row] of their dtype, on the first
  // member's device; one flat all-to-all of the rows delivers them.
  std::vector<Tensor> all_to_all_packed(const Group& group, const ProcessView& view,
                                        const std::vector<Tensor>& inputs, int64_t split_axis,
                                        int64_t concat_axis) {
    const int64_t k = group.size();
    const size_t rank = static_cast<size_t>(inputs[0].rank());
    const DType dtype = inputs[0].dtype();
    const Device& first = inputs[0].device();
    const size_t num_processes = view.size();
    std::vector<Shape> shapes = member_shapes(
        group, view, inputs, "all_to_all", [=](DType member_dtype, const Shape& shape) {
          return describe_all_to_all(member_dtype, shape, split_axis, concat_axis);
        });
    auto piece_shape = [&](const Shape& input, int64_t j) {
      return with_dim(input, split_axis, chunk_range(input[split_axis], k, j).size);
    };
    int64_t width = 0;
    for (size_t p = 0; p < num_processes; ++p) {
      for (size_t q = 0; q < num_processes; ++q) {
        int64_t elements = 0;
        for (int64_t i : view.members[p]) {
          for (int64_t j : view.members[q]) {
            elements += num_elements(piece_shape(shapes[static_cast<size_t>(i)], j));
          }
        }
        width = std::max(width, elements);
      }
    }
    const std::vector<int64_t>& mine = view.local_members();
    Tensor send = Tensor::empty({static_cast<int64_t>(num_processes) * width}, dtype, first);
    for (size_t q = 0; q < num_processes; ++q) {
      int64_t at = static_cast<int64_t>(q) * width;
      for (size_t i = 0; i < mine.size(); ++i) {
        for (int64_t j : view.members[q]) {
          Tensor piece = slice_box(
              inputs[i],
              at_dim(rank, split_axis, chunk_range(inputs[i].dim(split_axis), k, j).offset),
              piece_shape(inputs[i].shape(), j));
          copy_box(piece.reshaped({piece.num_elements()}), {0}, send, {at},
                   {piece.num_elements()});
          at += piece.num_elements();
        }
      }
    }
    Tensor recv = inter_->all_to_all(leaders(group, view), {send}, 0, 0)[0];

    // Row p of `recv` holds, for each member i of process p and each local member j, piece (i, j).
    std::vector<std::vector<Tensor>> pieces(mine.size(),
                                            std::vector<Tensor>(static_cast<size_t>(k)));
    for (size_t p = 0; p < num_processes; ++p) {
      int64_t at = static_cast<int64_t>(p) * width;
      for (int64_t i : view.members[p]) {
        for (size_t jl = 0; jl < mine.size(); ++jl) {
          const Shape shape = piece_shape(shapes[static_cast<size_t>(i)], mine[jl]);
          pieces[jl][static_cast<size_t>(i)] = unpacked(recv, at, shape);
          at += num_elements(shape);
        }
      }
    }
    std::vector<Tensor> out;
    for (size_t jl = 0; jl < mine.size(); ++jl) {
      int64_t total = 0;
      for (const Tensor& piece : pieces[jl]) total += piece.dim(concat_axis);
      Tensor result = Tensor::empty(with_dim(pieces[jl][0].shape(), concat_axis, total), dtype,
                                    inputs[jl].device());
      int64_t offset = 0;
      for (const Tensor& piece : pieces[jl]) {
        copy_box(piece, std::vector<int64_t>(rank, 0), result, at_dim(rank, concat_axis, offset),
                 piece.shape());
        offset += piece.dim(concat_axis);
      }
      out.push_back(std::move(result));
    }
    return out;
  }

  std::shared_ptr<CollectiveBackend> intra_;
  std::shared_ptr<CollectiveBackend> inter_;
  std::string name_;
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_hierarchical_backend(
    std::shared_ptr<CollectiveBackend> intra, std::shared_ptr<CollectiveBackend> inter) {
  if (!intra || !inter) {
    throw_error<InvalidArgumentError>("make_hierarchical_backend", "the {} backend is null",
                                      intra ? "inter-process" : "intra-process");
  }
  return std::make_shared<HierarchicalBackend>(std::move(intra), std::move(inter));
}

}  // namespace dtensor
