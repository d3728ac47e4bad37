#include "runtime/mpi/mpi_backend.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/block.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

// Tag for MPI_Comm_create_group: creations are serialised, so one tag serves all of them.
constexpr int kCreateGroupTag = 7177;
// Rank limit of the header a broadcast sends ahead of its data.
constexpr int64_t kMaxBroadcastRank = 32;

// The processes of a group, in the order of their first member, and the group positions of the
// members each one owns.
struct ProcessView {
  std::vector<int> processes;
  std::vector<std::vector<int64_t>> members;
  size_t self = 0;  // index of this process in `processes`

  bool single() const { return processes.size() == 1; }
  const std::vector<int64_t>& local_members() const { return members[self]; }
};

ProcessView view_of(const Group& group) {
  ProcessView view;
  for (int64_t i = 0; i < group.size(); ++i) {
    const int owner = static_cast<int>(group.owners[static_cast<size_t>(i)]);
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

// The members at `positions`, presented as a group owned entirely by this process.
Group owned_here(const Group& group, const std::vector<int64_t>& positions) {
  Group out{{}, {}, group.self};
  for (int64_t p : positions) {
    out.devices.push_back(group.devices[static_cast<size_t>(p)]);
    out.owners.push_back(group.self);
  }
  return out;
}

Group all_owned_here(const Group& group) {
  Group out = group;
  out.owners.assign(group.devices.size(), group.self);
  return out;
}

int mpi_count(int64_t n, const char* function) {
  if (n > INT_MAX) {
    throw_error<CommunicationError>(function,
                                    "{} elements exceed the int count of one MPI call; split the "
                                    "tensor",
                                    n);
  }
  return static_cast<int>(n);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kBF16:
      return MPI_UINT16_T;  // reduced by the user-defined ops below
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_BYTE;
}

template <ReduceOp kOp>
void reduce_bf16(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const BFloat16*>(in);
  auto* b = static_cast<BFloat16*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    float r = x + y;
    if constexpr (kOp == ReduceOp::kMax) r = max_propagating_nan(x, y);
    if constexpr (kOp == ReduceOp::kMin) r = min_propagating_nan(x, y);
    b[i] = BFloat16(r);
  }
}

// Max and min of floats for MPI: MPI_MAX and MPI_MIN leave NaN to the implementation (Open MPI
// keeps whichever operand its comparison happens to favour), so a NaN on another process could
// vanish. These propagate it, as the local reduction does.
template <typename T, ReduceOp kOp>
void reduce_float_extremum(void* in, void* inout, int* length, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *length; ++i) {
    b[i] =
        kOp == ReduceOp::kMax ? max_propagating_nan(a[i], b[i]) : min_propagating_nan(a[i], b[i]);
  }
}

// Product of the dims before `axis`: 1 when chunks along `axis` are contiguous in memory.
int64_t leading_extent(const Tensor& t, int64_t axis) {
  int64_t n = 1;
  for (int64_t d = 0; d < axis; ++d) n *= t.dim(d);
  return n;
}

// True when the processes, in view order, own consecutive runs of group positions, so their
// chunks follow each other along a split axis.
bool members_in_process_order(const ProcessView& view) {
  int64_t next = 0;
  for (const std::vector<int64_t>& members : view.members) {
    for (int64_t j : members) {
      if (j != next++) return false;
    }
  }
  return true;
}

// A byte buffer from the tensor pool (no zero fill).
Tensor byte_buffer(int64_t bytes) { return Tensor::empty({bytes}, DType::kBool); }

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

class MpiBackend final : public CollectiveBackend {
 public:
  explicit MpiBackend(std::shared_ptr<CollectiveBackend> local) : local_(std::move(local)) {}

  ~MpiBackend() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& [processes, comm] : comms_) MPI_Comm_free(&comm);
    for (MPI_Op& op : bf16_ops_) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
    for (MPI_Op& op : float_ops_) {
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
    }
  }

  std::string_view name() const override { return "mpi"; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->all_reduce(group, inputs, op);
    return share_result(reduce_across(group, view, inputs, op, "all_reduce"), inputs);
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->all_gather(group, inputs, axis);
    std::vector<Tensor> all = gather_members(group, view, inputs, "all_gather");
    return share_result(local_->all_gather(all_owned_here(group), all, axis)[0], inputs);
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->reduce_scatter(group, inputs, op, axis);
    if (leading_extent(inputs[0], axis) == 1 && members_in_process_order(view)) {
      return reduce_scatter_blocks(group, view, inputs, op, axis);
    }
    // General case: the whole reduction, then each member's chunk.
    Tensor reduced = reduce_across(group, view, inputs, op, "reduce_scatter");
    std::vector<Tensor> out;
    const std::vector<int64_t>& mine = view.local_members();
    for (size_t i = 0; i < mine.size(); ++i) {
      ShardRange r = chunk_range(reduced.dim(axis), group.size(), mine[i]);
      std::vector<int64_t> begin(static_cast<size_t>(reduced.rank()), 0);
      begin[static_cast<size_t>(axis)] = r.offset;
      Shape extent = reduced.shape();
      extent[static_cast<size_t>(axis)] = r.size;
      out.push_back(slice_box(reduced, begin, extent).with_device(inputs[i].device()));
    }
    return out;
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->all_to_all(group, inputs, split_axis, concat_axis);
    const int64_t k = group.size();
    const size_t rank = static_cast<size_t>(inputs[0].rank());
    const DType dtype = inputs[0].dtype();
    const size_t esize = dtype_size(dtype);
    const size_t num_processes = view.processes.size();
    const std::vector<int64_t>& mine = view.local_members();
    auto piece_shape = [&](const Shape& input, int64_t j) {
      Shape shape = input;
      shape[static_cast<size_t>(split_axis)] = chunk_range(input[split_axis], k, j).size;
      return shape;
    };

    std::lock_guard<std::mutex> lock(mu_);
    MPI_Comm comm = comm_for(view.processes);
    std::vector<Shape> shapes = member_shapes(group, view, inputs, comm, "all_to_all");

    // Send: for each process q, each local member i, each member j of q: chunk j of input i.
    std::vector<int64_t> send_bytes(num_processes, 0), recv_bytes(num_processes, 0);
    for (size_t q = 0; q < num_processes; ++q) {
      for (size_t i = 0; i < mine.size(); ++i) {
        for (int64_t j : view.members[q]) {
          send_bytes[q] += num_elements(piece_shape(inputs[i].shape(), j)) * esize;
        }
      }
      for (int64_t i : view.members[q]) {
        for (int64_t j : mine) {
          recv_bytes[q] += num_elements(piece_shape(shapes[static_cast<size_t>(i)], j)) * esize;
        }
      }
    }
    std::vector<int> send_counts, recv_counts;
    for (size_t q = 0; q < num_processes; ++q) {
      send_counts.push_back(mpi_count(send_bytes[q], "all_to_all"));
      recv_counts.push_back(mpi_count(recv_bytes[q], "all_to_all"));
    }
    std::vector<int> send_displs = displacements(send_counts);
    std::vector<int> recv_displs = displacements(recv_counts);
    Tensor send =
        byte_buffer(mpi_count(send_displs.back() + int64_t{send_counts.back()}, "all_to_all"));
    Tensor recv =
        byte_buffer(mpi_count(recv_displs.back() + int64_t{recv_counts.back()}, "all_to_all"));
    size_t at = 0;
    for (size_t q = 0; q < num_processes; ++q) {
      for (size_t i = 0; i < mine.size(); ++i) {
        for (int64_t j : view.members[q]) {
          std::vector<int64_t> begin(rank, 0);
          begin[static_cast<size_t>(split_axis)] =
              chunk_range(inputs[i].dim(split_axis), k, j).offset;
          Tensor piece = slice_box(inputs[i], begin, piece_shape(inputs[i].shape(), j));
          std::memcpy(bytes_of(send) + at, piece.raw_data(), piece.nbytes());
          at += piece.nbytes();
        }
      }
    }
    check_mpi(
        MPI_Alltoallv(send.raw_data(), send_counts.data(), send_displs.data(), MPI_BYTE,
                      recv.raw_data(), recv_counts.data(), recv_displs.data(), MPI_BYTE, comm),
        "all_to_all", "MPI_Alltoallv");

    // Output of local member j: the pieces (i, j) of every member i, along concat_axis in
    // group order. Received data runs by source process, then member i, then local member j.
    std::vector<std::vector<Tensor>> pieces(mine.size(),
                                            std::vector<Tensor>(static_cast<size_t>(k)));
    at = 0;
    for (size_t q = 0; q < num_processes; ++q) {
      for (int64_t i : view.members[q]) {
        for (size_t jl = 0; jl < mine.size(); ++jl) {
          Tensor piece =
              Tensor::empty(piece_shape(shapes[static_cast<size_t>(i)], mine[jl]), dtype);
          std::memcpy(piece.raw_data(), bytes_of(recv) + at, piece.nbytes());
          at += piece.nbytes();
          pieces[jl][static_cast<size_t>(i)] = std::move(piece);
        }
      }
    }
    std::vector<Tensor> out;
    for (size_t jl = 0; jl < mine.size(); ++jl) {
      Shape out_shape = pieces[jl][0].shape();
      int64_t total = 0;
      for (const Tensor& piece : pieces[jl]) total += piece.dim(concat_axis);
      out_shape[static_cast<size_t>(concat_axis)] = total;
      Tensor result = Tensor::empty(out_shape, dtype, inputs[jl].device());
      int64_t offset = 0;
      for (const Tensor& piece : pieces[jl]) {
        std::vector<int64_t> dst(rank, 0);
        dst[static_cast<size_t>(concat_axis)] = offset;
        copy_box(piece, std::vector<int64_t>(rank, 0), result, dst, piece.shape());
        offset += piece.dim(concat_axis);
      }
      out.push_back(std::move(result));
    }
    return out;
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->broadcast(group, inputs, root);
    const int root_owner = static_cast<int>(group.owners[static_cast<size_t>(root)]);
    const int root_rank =
        static_cast<int>(std::find(view.processes.begin(), view.processes.end(), root_owner) -
                         view.processes.begin());
    const bool am_root = root_owner == group.self;
    // Header: dtype, rank, dims.
    std::vector<int64_t> header(2 + kMaxBroadcastRank, 0);
    Tensor source;
    if (am_root) {
      const std::vector<int64_t>& mine = view.local_members();
      const size_t at =
          static_cast<size_t>(std::find(mine.begin(), mine.end(), root) - mine.begin());
      source = inputs[at];
      if (source.rank() > kMaxBroadcastRank) {
        throw_error<CommunicationError>("broadcast", "rank {} exceeds the limit of {}",
                                        source.rank(), kMaxBroadcastRank);
      }
      header[0] = static_cast<int64_t>(source.dtype());
      header[1] = source.rank();
      for (int64_t d = 0; d < source.rank(); ++d)
        header[static_cast<size_t>(2 + d)] = source.dim(d);
    }
    std::lock_guard<std::mutex> lock(mu_);
    MPI_Comm comm = comm_for(view.processes);
    check_mpi(
        MPI_Bcast(header.data(), static_cast<int>(header.size()), MPI_INT64_T, root_rank, comm),
        "broadcast", "MPI_Bcast");
    if (!am_root) {
      Shape shape(header.begin() + 2, header.begin() + 2 + header[1]);
      source = Tensor::empty(shape, static_cast<DType>(header[0]), inputs[0].device());
    }
    check_mpi(
        MPI_Bcast(source.raw_data(), mpi_count(static_cast<int64_t>(source.nbytes()), "broadcast"),
                  MPI_BYTE, root_rank, comm),
        "broadcast", "MPI_Bcast");
    return share_result(source, inputs);
  }

  void barrier(const Group& group) override {
    ProcessView view = view_of(group);
    if (view.single()) return local_->barrier(group);
    std::lock_guard<std::mutex> lock(mu_);
    check_mpi(MPI_Barrier(comm_for(view.processes)), "barrier", "MPI_Barrier");
  }

 private:
  // The reduction over this process's members (through the in-process backend).
  Tensor reduce_local(const Group& group, const ProcessView& view,
                      const std::vector<Tensor>& inputs, ReduceOp op) {
    if (inputs.size() == 1) return inputs[0];
    return local_->all_reduce(owned_here(group, view.local_members()), inputs, op)[0];
  }

  // The reduction over every member: local members first, then MPI across the processes.
  Tensor reduce_across(const Group& group, const ProcessView& view,
                       const std::vector<Tensor>& inputs, ReduceOp op, const char* function) {
    Tensor mine = reduce_local(group, view, inputs, op);
    Tensor out = Tensor::empty(mine.shape(), mine.dtype(), inputs[0].device());
    std::lock_guard<std::mutex> lock(mu_);
    MPI_Comm comm = comm_for(view.processes);
    check_mpi(
        MPI_Allreduce(mine.raw_data(), out.raw_data(), mpi_count(mine.num_elements(), function),
                      mpi_type(mine.dtype()), mpi_op(op, mine.dtype()), comm),
        function, "MPI_Allreduce");
    return out;
  }

  // Reduce-scatter when each process's chunks form one contiguous block of memory (the split
  // axis is the first non-trivial dim and each process owns consecutive members): local
  // reduction, then MPI_Reduce_scatter delivers each process only its block.
  std::vector<Tensor> reduce_scatter_blocks(const Group& group, const ProcessView& view,
                                            const std::vector<Tensor>& inputs, ReduceOp op,
                                            int64_t axis) {
    Tensor mine = reduce_local(group, view, inputs, op);
    const int64_t k = group.size();
    const int64_t n = mine.dim(axis);
    const int64_t row = mine.dim(axis) == 0 ? 0 : mine.num_elements() / mine.dim(axis);
    std::vector<int> counts;
    int64_t own_rows = 0;
    for (size_t p = 0; p < view.members.size(); ++p) {
      int64_t rows = 0;
      for (int64_t j : view.members[p]) rows += chunk_range(n, k, j).size;
      counts.push_back(mpi_count(rows * row, "reduce_scatter"));
      if (p == view.self) own_rows = rows;
    }
    const std::vector<int64_t>& local = view.local_members();
    const int64_t first_row = chunk_range(n, k, local.front()).offset;
    Shape block_shape = mine.shape();
    block_shape[static_cast<size_t>(axis)] = own_rows;
    Tensor block = Tensor::empty(block_shape, mine.dtype(), inputs[0].device());
    {
      std::lock_guard<std::mutex> lock(mu_);
      MPI_Comm comm = comm_for(view.processes);
      check_mpi(MPI_Reduce_scatter(mine.raw_data(), block.raw_data(), counts.data(),
                                   mpi_type(mine.dtype()), mpi_op(op, mine.dtype()), comm),
                "reduce_scatter", "MPI_Reduce_scatter");
    }
    if (local.size() == 1) return {block};
    std::vector<Tensor> out;
    for (size_t i = 0; i < local.size(); ++i) {
      ShardRange r = chunk_range(n, k, local[i]);
      std::vector<int64_t> begin(static_cast<size_t>(mine.rank()), 0);
      begin[static_cast<size_t>(axis)] = r.offset - first_row;
      Shape extent = mine.shape();
      extent[static_cast<size_t>(axis)] = r.size;
      out.push_back(slice_box(block, begin, extent).with_device(inputs[i].device()));
    }
    return out;
  }

  // The shape of every member's tensor, in group order (all-gather-v of the dims; nothing to
  // exchange for scalars). Caller holds mu_.
  std::vector<Shape> member_shapes(const Group& group, const ProcessView& view,
                                   const std::vector<Tensor>& inputs, MPI_Comm comm,
                                   const char* function) {
    const int64_t rank = inputs[0].rank();
    const size_t num_processes = view.processes.size();
    std::vector<Shape> shapes(static_cast<size_t>(group.size()));
    if (rank == 0) return shapes;
    std::vector<int64_t> mine;
    for (const Tensor& in : inputs) mine.insert(mine.end(), in.shape().begin(), in.shape().end());
    std::vector<int> counts(num_processes);
    for (size_t p = 0; p < num_processes; ++p) {
      counts[p] = static_cast<int>(view.members[p].size() * static_cast<size_t>(rank));
    }
    std::vector<int> displs = displacements(counts);
    std::vector<int64_t> dims(static_cast<size_t>(displs.back() + counts.back()));
    check_mpi(MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, dims.data(),
                             counts.data(), displs.data(), MPI_INT64_T, comm),
              function, "MPI_Allgatherv");
    size_t at = 0;
    for (size_t p = 0; p < num_processes; ++p) {
      for (int64_t pos : view.members[p]) {
        shapes[static_cast<size_t>(pos)].assign(dims.begin() + static_cast<ptrdiff_t>(at),
                                                dims.begin() + static_cast<ptrdiff_t>(at) + rank);
        at += static_cast<size_t>(rank);
      }
    }
    return shapes;
  }

  // Every member's tensor in group order, on every process of the group (all-gather-v of the
  // shapes, then of the bytes).
  std::vector<Tensor> gather_members(const Group& group, const ProcessView& view,
                                     const std::vector<Tensor>& inputs, const char* function) {
    const DType dtype = inputs[0].dtype();
    const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
    const size_t num_processes = view.processes.size();
    std::lock_guard<std::mutex> lock(mu_);
    MPI_Comm comm = comm_for(view.processes);
    std::vector<Shape> shapes = member_shapes(group, view, inputs, comm, function);

    std::vector<int64_t> bytes_per_process(num_processes, 0);
    for (size_t p = 0; p < num_processes; ++p) {
      for (int64_t pos : view.members[p]) {
        bytes_per_process[p] += num_elements(shapes[static_cast<size_t>(pos)]) * esize;
      }
    }
    std::vector<int> counts(num_processes);
    for (size_t p = 0; p < num_processes; ++p) {
      counts[p] = mpi_count(bytes_per_process[p], function);
    }
    std::vector<int> displs = displacements(counts);
    const int64_t total = static_cast<int64_t>(displs.back()) + counts.back();
    mpi_count(total, function);
    Tensor received = byte_buffer(total);

    Tensor packed;
    if (inputs.size() == 1) {
      packed = inputs[0];
    } else {
      packed = byte_buffer(bytes_per_process[view.self]);
      size_t at = 0;
      for (const Tensor& in : inputs) {
        std::memcpy(bytes_of(packed) + at, in.raw_data(), in.nbytes());
        at += in.nbytes();
      }
    }
    check_mpi(MPI_Allgatherv(packed.raw_data(), counts[view.self], MPI_BYTE, bytes_of(received),
                             counts.data(), displs.data(), MPI_BYTE, comm),
              function, "MPI_Allgatherv");

    std::vector<Tensor> all(static_cast<size_t>(group.size()));
    for (size_t p = 0; p < num_processes; ++p) {
      size_t at = static_cast<size_t>(displs[p]);
      for (size_t i = 0; i < view.members[p].size(); ++i) {
        const int64_t pos = view.members[p][i];
        const Shape& shape = shapes[static_cast<size_t>(pos)];
        const size_t nbytes = static_cast<size_t>(num_elements(shape) * esize);
        if (p == view.self) {
          all[static_cast<size_t>(pos)] = inputs[i];
        } else {
          Tensor t = Tensor::empty(
              shape, dtype,
              Device{inputs[0].device().type, group.devices[static_cast<size_t>(pos)]});
          std::memcpy(t.raw_data(), bytes_of(received) + at, nbytes);
          all[static_cast<size_t>(pos)] = std::move(t);
        }
        at += nbytes;
      }
    }
    return all;
  }

  // The communicator over `processes` (ranks in that order), created on first use. Caller holds
  // mu_.
  MPI_Comm comm_for(const std::vector<int>& processes) {
    auto it = comms_.find(processes);
    if (it != comms_.end()) return it->second;
    MPI_Group world, subset;
    check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "collective", "MPI_Comm_group");
    check_mpi(MPI_Group_incl(world, static_cast<int>(processes.size()), processes.data(), &subset),
              "collective", "MPI_Group_incl");
    MPI_Comm comm = MPI_COMM_NULL;
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, subset, kCreateGroupTag, &comm);
    MPI_Group_free(&subset);
    MPI_Group_free(&world);
    check_mpi(rc, "collective", "MPI_Comm_create_group");
    check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "collective",
              "MPI_Comm_set_errhandler");
    comms_.emplace(processes, comm);
    return comm;
  }

  // Caller holds mu_.
  MPI_Op mpi_op(ReduceOp op, DType dtype) {
    if (dtype == DType::kBool) return op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
    if (dtype == DType::kBF16) {
      MPI_Op& slot = bf16_ops_[static_cast<size_t>(op)];
      if (slot == MPI_OP_NULL) {
        MPI_User_function* fn = op == ReduceOp::kSum   ? &reduce_bf16<ReduceOp::kSum>
                                : op == ReduceOp::kMax ? &reduce_bf16<ReduceOp::kMax>
                                                       : &reduce_bf16<ReduceOp::kMin>;
        check_mpi(MPI_Op_create(fn, /*commute=*/1, &slot), "all_reduce", "MPI_Op_create");
      }
      return slot;
    }
    if ((dtype == DType::kF32 || dtype == DType::kF64) && op != ReduceOp::kSum) {
      const bool f64 = dtype == DType::kF64, max = op == ReduceOp::kMax;
      MPI_Op& slot = float_ops_[(f64 ? 2 : 0) + (max ? 0 : 1)];
      if (slot == MPI_OP_NULL) {
        MPI_User_function* fn = f64 ? (max ? &reduce_float_extremum<double, ReduceOp::kMax>
                                           : &reduce_float_extremum<double, ReduceOp::kMin>)
                                    : (max ? &reduce_float_extremum<float, ReduceOp::kMax>
                                           : &reduce_float_extremum<float, ReduceOp::kMin>);
        check_mpi(MPI_Op_create(fn, /*commute=*/1, &slot), "all_reduce", "MPI_Op_create");
      }
      return slot;
    }
    switch (op) {
      case ReduceOp::kSum:
        return MPI_SUM;
      case ReduceOp::kMax:
        return MPI_MAX;
      case ReduceOp::kMin:
        return MPI_MIN;
    }
    return MPI_SUM;
  }

  std::shared_ptr<CollectiveBackend> local_;
  std::mutex mu_;
  std::map<std::vector<int>, MPI_Comm> comms_;
  MPI_Op bf16_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  // NaN-propagating max and min: f32 max, f32 min, f64 max, f64 min.
  MPI_Op float_ops_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_mpi_backend(std::shared_ptr<CollectiveBackend> local) {
  if (!local) throw_error<InvalidArgumentError>("make_mpi_backend", "local backend is null");
  return std::make_shared<MpiBackend>(std::move(local));
}

}  // namespace dtensor
