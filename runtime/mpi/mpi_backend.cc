#include "runtime/mpi/mpi_backend.h"

#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/collective_bytes.h"
#include "runtime/mpi/async_buckets.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/mpi_session.h"
#include "runtime/mpi/mpi_types.h"
#include "runtime/mpi/shared_memory_backend.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

// Rank limit of a broadcast: the receivers learn the root's shape from its descriptor.
constexpr int64_t kMaxBroadcastRank = CollectiveDescriptor::kInlineDims;

Tensor bytes_buffer(int bytes) { return byte_buffer(Shape{bytes}); }

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

// Copies the blocks that processes sent for a concatenation along `axis` out of `received`
// (process p's block at byte offset displs[p], `sizes[p]` long along `axis`) into `out`. Each
// block is row-major, so it interleaves with the others once per index of the leading dims.
void concat_blocks(const char* received, const std::vector<int>& displs,
                   const std::vector<int64_t>& sizes, Tensor& out, int64_t axis) {
  const int64_t lead = leading_extent(out, axis);
  const int64_t total = out.dim(axis);
  const int64_t row_bytes =
      total == 0 || lead == 0
          ? 0
          : static_cast<int64_t>(out.nbytes()) / (lead * total);  // bytes per index along axis
  char* dst = bytes_of(out);
  int64_t offset = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const int64_t run = sizes[p] * row_bytes;
    for (int64_t l = 0; l < lead && run > 0; ++l) {
      std::memcpy(dst + (l * total + offset) * row_bytes, received + displs[p] + l * run,
                  static_cast<size_t>(run));
    }
    offset += sizes[p];
  }
}

// The network layer: every collective over MPI's own calls (what processes on several hosts
// use; runtime/mpi/shared_memory_backend.h takes the all-reduces of processes sharing a host).
class MpiNetworkBackend final : public CollectiveBackend {
 public:
  explicit MpiNetworkBackend(std::shared_ptr<MpiSession> session) : session_(std::move(session)) {}
  ~MpiNetworkBackend() override { session_->comm_thread().stop(); }  // its work uses this

  std::string_view name() const override { return "mpi"; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    require_one_member_per_process(group, inputs.size(), name(), "all_reduce");
    return {reduce_all(group, inputs[0], op, "all_reduce", /*agree_first=*/true)};
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    require_one_member_per_process(group, inputs.size(), name(), "all_gather");
    const Tensor& in = inputs[0];
    const size_t k = static_cast<size_t>(group.size());
    std::unique_lock<std::mutex> lock = session_->exclusive();
    // Only the sizes along `axis` differ between members: their descriptors carry them.
    const std::vector<CollectiveDescriptor> all =
        session_->agree(group, describe_all_gather(in, axis), "all_gather");
    std::vector<int64_t> sizes(k);
    for (size_t p = 0; p < k; ++p) sizes[p] = all[p].free_size;
    MPI_Comm comm = session_->comm_for(ranks_of(group));
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    Tensor out = Tensor::empty(with_dim(in.shape(), axis, total), in.dtype(), in.device());
    // Bytes per index along `axis` (from the output: a member may have none).
    const int64_t other_bytes = total == 0 ? 0 : static_cast<int64_t>(out.nbytes()) / total;
    std::vector<int> counts(k);
    for (size_t p = 0; p < k; ++p) counts[p] = mpi_count(sizes[p] * other_bytes, "all_gather");
    mpi_count(total * other_bytes, "all_gather");  // the displacements are ints too
    std::vector<int> displs = displacements(counts);
    const int self = self_rank(group);
    if (leading_extent(in, axis) == 1) {
      // The members' bytes follow each other in the result: receive in place.
      check_mpi(MPI_Allgatherv(in.raw_data(), counts[self], MPI_BYTE, out.raw_data(), counts.data(),
                               displs.data(), MPI_BYTE, comm),
                "all_gather", "MPI_Allgatherv");
      return {out};
    }
    Tensor received = bytes_buffer(mpi_count(displs.back() + int64_t{counts.back()}, "all_gather"));
    check_mpi(MPI_Allgatherv(in.raw_data(), counts[self], MPI_BYTE, received.raw_data(),
                             counts.data(), displs.data(), MPI_BYTE, comm),
              "all_gather", "MPI_Allgatherv");
    concat_blocks(bytes_of(received), displs, sizes, out, axis);
    return {out};
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    require_one_member_per_process(group, inputs.size(), name(), "reduce_scatter");
    const Tensor& in = inputs[0];
    const int64_t k = group.size();
    const int64_t n = in.dim(axis);
    const int self = self_rank(group);
    const ShardRange own = chunk_range(n, k, self);
    if (agreement_enabled()) {
      std::unique_lock<std::mutex> lock = session_->exclusive();
      session_->agree(group, describe_reduce_scatter(in, op, axis), "reduce_scatter");
    }
    if (leading_extent(in, axis) == 1) {
      // Chunks are contiguous: MPI_Reduce_scatter delivers each process only its chunk.
      const int64_t row = n == 0 ? 0 : in.num_elements() / n;
      std::vector<int> counts;
      for (int64_t p = 0; p < k; ++p) {
        counts.push_back(mpi_count(chunk_range(n, k, p).size * row, "reduce_scatter"));
      }
      Tensor out = Tensor::empty(with_dim(in.shape(), axis, own.size), in.dtype(), in.device());
      std::unique_lock<std::mutex> lock = session_->exclusive();
      MPI_Comm comm = session_->comm_for(ranks_of(group));
      check_mpi(MPI_Reduce_scatter(in.raw_data(), out.raw_data(), counts.data(),
                                   mpi_type(in.dtype()), session_->op_for(op, in.dtype()), comm),
                "reduce_scatter", "MPI_Reduce_scatter");
      return {out};
    }
    // General case: the whole reduction, then this member's chunk.
    Tensor reduced = reduce_all(group, in, op, "reduce_scatter", /*agree_first=*/false);
    std::vector<int64_t> begin(static_cast<size_t>(in.rank()), 0);
    begin[static_cast<size_t>(axis)] = own.offset;
    return {slice_box(reduced, begin, with_dim(in.shape(), axis, own.size))};
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    require_one_member_per_process(group, inputs.size(), name(), "all_to_all");
    const Tensor& in = inputs[0];
    const int64_t k = group.size();
    const size_t rank = static_cast<size_t>(in.rank());
    const size_t esize = dtype_size(in.dtype());
    const int self = self_rank(group);
    auto piece_shape = [&](const Shape& input, int64_t j) {
      return with_dim(input, split_axis, chunk_range(input[split_axis], k, j).size);
    };

    std::unique_lock<std::mutex> lock = session_->exclusive();
    // Members agree on everything but their sizes along concat_axis, which their descriptors carry.
    const std::vector<CollectiveDescriptor> all =
        session_->agree(group, describe_all_to_all(in, split_axis, concat_axis), "all_to_all");
    std::vector<Shape> shapes;
    for (const CollectiveDescriptor& d : all)
      shapes.push_back(with_dim(in.shape(), concat_axis, d.free_size));
    MPI_Comm comm = session_->comm_for(ranks_of(group));
    std::vector<int> send_counts, recv_counts;
    std::vector<int64_t> recv_sizes;  // along concat_axis
    for (int64_t q = 0; q < k; ++q) {
      send_counts.push_back(mpi_count(
          num_elements(piece_shape(in.shape(), q)) * static_cast<int64_t>(esize), "all_to_all"));
      Shape incoming = piece_shape(shapes[static_cast<size_t>(q)], self);
      recv_counts.push_back(
          mpi_count(num_elements(incoming) * static_cast<int64_t>(esize), "all_to_all"));
      recv_sizes.push_back(incoming[static_cast<size_t>(concat_axis)]);
    }
    // The displacements are ints too.
    mpi_count(num_elements(in.shape()) * static_cast<int64_t>(esize), "all_to_all");
    int64_t recv_total = 0;
    for (int c : recv_counts) recv_total += c;
    mpi_count(recv_total, "all_to_all");
    std::vector<int> send_displs = displacements(send_counts);
    std::vector<int> recv_displs = displacements(recv_counts);

    // Chunks along a split axis with no leading extent are already in send order.
    Tensor send = in;
    if (leading_extent(in, split_axis) != 1) {
      send =
          bytes_buffer(mpi_count(send_displs.back() + int64_t{send_counts.back()}, "all_to_all"));
      for (int64_t q = 0; q < k; ++q) {
        std::vector<int64_t> begin(rank, 0);
        begin[static_cast<size_t>(split_axis)] = chunk_range(in.dim(split_axis), k, q).offset;
        Tensor piece = slice_box(in, begin, piece_shape(in.shape(), q));
        std::memcpy(bytes_of(send) + send_displs[static_cast<size_t>(q)], piece.raw_data(),
                    piece.nbytes());
      }
    }
    int64_t total = 0;
    for (int64_t s : recv_sizes) total += s;
    Tensor out = Tensor::empty(with_dim(piece_shape(shapes[0], self), concat_axis, total),
                               in.dtype(), in.device());
    const bool in_place = leading_extent(out, concat_axis) == 1;
    Tensor recv = in_place ? out
                           : bytes_buffer(mpi_count(
                                 recv_displs.back() + int64_t{recv_counts.back()}, "all_to_all"));
    check_mpi(
        MPI_Alltoallv(send.raw_data(), send_counts.data(), send_displs.data(), MPI_BYTE,
                      recv.raw_data(), recv_counts.data(), recv_displs.data(), MPI_BYTE, comm),
        "all_to_all", "MPI_Alltoallv");
    if (!in_place) concat_blocks(bytes_of(recv), recv_displs, recv_sizes, out, concat_axis);
    return {out};
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    require_one_member_per_process(group, inputs.size(), name(), "broadcast");
    const int root_rank = static_cast<int>(root);
    const bool am_root = self_rank(group) == root_rank;
    std::unique_lock<std::mutex> lock = session_->exclusive();
    // The root's descriptor carries its dtype and shape to the others.
    const std::vector<CollectiveDescriptor> all = session_->agree(
        group, describe_broadcast(am_root ? &inputs[0] : nullptr, root), "broadcast");
    const CollectiveDescriptor& header = all[static_cast<size_t>(root_rank)];
    if (header.rank > kMaxBroadcastRank) {
      throw_error<CommunicationError>("broadcast", "rank {} exceeds the limit of {}", header.rank,
                                      kMaxBroadcastRank);
    }
    Tensor source = am_root ? inputs[0]
                            : Tensor::empty(header.shape(), static_cast<DType>(header.dtype),
                                            inputs[0].device());
    MPI_Comm comm = session_->comm_for(ranks_of(group));
    check_mpi(
        MPI_Bcast(source.raw_data(), mpi_count(static_cast<int64_t>(source.nbytes()), "broadcast"),
                  MPI_BYTE, root_rank, comm),
        "broadcast", "MPI_Bcast");
    return {source};
  }

  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    if (!session_->threaded()) return CollectiveBackend::all_reduce_start(group, inputs, op);
    return start_bucket(*session_, name(), group, inputs, op,
                        [session = session_.get(), ranks = ranks_of(group), op](Bucket& b) {
                          reduce_bucket_over_mpi(*session, b, ranks, op);
                        });
  }

  void barrier(const Group& group) override {
    require_one_member_per_process(group, 1, name(), "barrier");
    std::unique_lock<std::mutex> lock = session_->exclusive();
    if (agreement_enabled()) {
      // Every member has sent its descriptor: the exchange is the barrier.
      session_->agree(group, describe_barrier(), "barrier");
      return;
    }
    check_mpi(MPI_Barrier(session_->comm_for(ranks_of(group))), "barrier", "MPI_Barrier");
  }

 private:
  // MPI_Allreduce over every member; with agree_first, the members first agree on the call (when
  // agreement is on).
  Tensor reduce_all(const Group& group, const Tensor& in, ReduceOp op, const char* function,
                    bool agree_first) {
    Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
    std::unique_lock<std::mutex> lock = session_->exclusive();
    if (agree_first && agreement_enabled()) {
      session_->agree(group, describe_all_reduce(in, op), function);
    }
    MPI_Comm comm = session_->comm_for(ranks_of(group));
    const double began = overlap_trace_on() ? trace_clock_ms() : 0;
    check_mpi(MPI_Allreduce(in.raw_data(), out.raw_data(), mpi_count(in.num_elements(), function),
                            mpi_type(in.dtype()), session_->op_for(op, in.dtype()), comm),
              function, "MPI_Allreduce");
    if (overlap_trace_on()) trace_blocking(group.self, in.nbytes(), began);
    return out;
  }

  std::shared_ptr<MpiSession> session_;
};

// DTENSOR_MPI_SHARED=0 keeps processes of one host on MPI's own all-reduce (no shared-memory
// layer).
bool shared_memory_layer_on() {
  const char* v = std::getenv("DTENSOR_MPI_SHARED");
  return v == nullptr || v[0] == '\0' || v[0] != '0';
}

}  // namespace

std::shared_ptr<CollectiveBackend> make_mpi_backend() {
  auto session = std::make_shared<MpiSession>();
  auto network = std::make_shared<MpiNetworkBackend>(session);
  if (!shared_memory_layer_on()) return network;
  return make_shared_memory_backend(std::move(network), std::move(session));
}

void set_collective_agreement(bool on) { set_agreement_enabled(on); }

int64_t shared_memory_reductions() { return shared_memory_reduction_count(); }

}  // namespace dtensor
