#include "runtime/mpi/mpi_backend.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/mpi/comm_thread.h"
#include "runtime/mpi/control_channel.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/shared_reducer.h"
#include "runtime/shape.h"

namespace dtensor {
namespace {

// Tag for MPI_Comm_create_group: creations are serialised, so one tag serves all of them.
constexpr int kCreateGroupTag = 7177;
// Rank limit of a broadcast: the receivers learn the root's shape from its descriptor.
constexpr int64_t kMaxBroadcastRank = CollectiveDescriptor::kInlineDims;

static_assert(sizeof(CollectiveDescriptor) <= SharedReducer::kExchangeBytes,
              "a descriptor must fit the shared-memory exchange");

// Whether all-reduces, reduce-scatters, buckets and barriers agree before they run (see
// set_collective_agreement).
std::atomic<bool> agreement_on{true};

// The MPI ranks of a group's processes, in group order (one member per process): a member's
// group position is its rank in the group's communicator.
std::vector<int> ranks_of(const Group& group) {
  return std::vector<int>(group.owners.begin(), group.owners.end());
}

int self_rank(const Group& group) {
  return static_cast<int>(std::find(group.owners.begin(), group.owners.end(), group.self) -
                          group.owners.begin());
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

// A byte buffer from the tensor pool (no zero fill).
Tensor byte_buffer(int64_t bytes) { return Tensor::empty({bytes}, DType::kBool); }

Shape with_dim(Shape shape, int64_t axis, int64_t size) {
  shape[static_cast<size_t>(axis)] = size;
  return shape;
}

char* bytes_of(Tensor& t) { return static_cast<char*>(t.raw_data()); }

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

// One MPI_Iallreduce in flight: the send buffer kept alive until it completes, the received
// bucket split back into the tensors' shapes by wait(). MPI calls take the backend's lock, which
// outlives this (the backend stays registered while collectives run).
class MpiPending final : public PendingCollective {
 public:
  MpiPending(std::mutex& mu, Tensor send, const std::vector<std::vector<Tensor>>& inputs)
      : mu_(mu),
        send_(std::move(send)),
        received_(Tensor::empty(send_.shape(), send_.dtype(), send_.device())) {
    for (const std::vector<Tensor>& members : inputs) shapes_.push_back(members[0].shape());
  }
  // Never left running: its buffers die with it.
  ~MpiPending() override {
    if (!active_) return;
    std::lock_guard<std::mutex> lock(mu_);
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  Tensor& received() { return received_; }
  MPI_Request* request() { return &request_; }
  void started() { active_ = true; }

  bool test() override {
    if (!active_) return true;
    int done = 0;
    std::lock_guard<std::mutex> lock(mu_);
    check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "all_reduce_start", "MPI_Test");
    if (done) active_ = false;
    return done != 0;
  }

  std::vector<std::vector<Tensor>> wait() override {
    if (active_) {
      std::lock_guard<std::mutex> lock(mu_);
      active_ = false;
      check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "all_reduce_start", "MPI_Wait");
    }
    std::vector<std::vector<Tensor>> out;
    if (shapes_.size() == 1) {
      out.push_back({received_});  // sent from the tensor itself: its shape already
      return out;
    }
    const char* at = static_cast<const char*>(received_.raw_data());
    for (const Shape& shape : shapes_) {
      Tensor t = Tensor::empty(shape, received_.dtype(), received_.device());
      std::memcpy(t.raw_data(), at, t.nbytes());
      at += t.nbytes();
      out.push_back({std::move(t)});
    }
    return out;
  }

 private:
  std::mutex& mu_;
  Tensor send_;
  Tensor received_;
  std::vector<Shape> shapes_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool active_ = false;
};

// DTENSOR_OVERLAP_TRACE=1: one line per bucket on stderr when it is waited for, with the
// system-wide monotonic clock in ms (comparable between the processes of one host): when the
// caller queued it, when the communication thread began and ended its MPI calls, and when the
// caller began and ended waiting. Blocking all-reduces print their span too.
bool overlap_trace_on() {
  static const bool on = [] {
    const char* v = std::getenv("DTENSOR_OVERLAP_TRACE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// DTENSOR_MPI_COMM_THREAD: 0 sends buckets as one MPI_Iallreduce from the caller's thread, 1
// runs blocking MPI_Allreduce calls on the communication thread, 2 (the default) nonblocking ones
// polled with yields there when two processes take part (blocking ones otherwise).
int comm_thread_mode() {
  static const int mode = [] {
    const char* v = std::getenv("DTENSOR_MPI_COMM_THREAD");
    return v == nullptr || v[0] == '\0' ? 2 : std::atoi(v);
  }();
  return mode;
}

// DTENSOR_MPI_SHARED=0 keeps processes of one host on MPI's own all-reduce instead of a
// SharedReducer (runtime/mpi/shared_reducer.h).
bool shared_reducers_on() {
  static const bool on = [] {
    const char* v = std::getenv("DTENSOR_MPI_SHARED");
    return v == nullptr || v[0] == '\0' || v[0] != '0';
  }();
  return on;
}

std::atomic<int64_t> shared_reductions{0};

// A SharedReducer over an MPI shared-memory window (kept until MPI_Finalize frees it: freeing
// it earlier would be a collective call in a destructor).
struct SharedWindow {
  MPI_Win window = MPI_WIN_NULL;
  std::unique_ptr<SharedReducer> reducer;
};

// A bucket handed to the communication thread: the tensors, their results (allocated by the
// caller: the tensor pool is thread-safe, but allocating here keeps the worker to MPI alone), and
// the error MPI gave, if any. Shared by the caller's handle and the queued work, so a handle
// dropped unfinished leaves nothing dangling.
struct ThreadedBucket {
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::exception_ptr error;
  int64_t process = 0, bytes = 0;
  double queued = 0, began = 0, ended = 0;  // trace timestamps
};

class ThreadedPending final : public PendingCollective {
 public:
  ThreadedPending(CommThread& thread, uint64_t ticket, std::shared_ptr<ThreadedBucket> bucket)
      : thread_(thread), ticket_(ticket), bucket_(std::move(bucket)) {}

  bool test() override { return thread_.done(ticket_); }

  std::vector<std::vector<Tensor>> wait() override {
    const double waiting = overlap_trace_on() ? now_ms() : 0;
    thread_.wait(ticket_);
    if (bucket_->error) std::rethrow_exception(bucket_->error);
    if (overlap_trace_on()) {
      const ThreadedBucket& b = *bucket_;
      std::fprintf(stderr,
                   "[overlap-trace] process=%lld bucket tensors=%zu bytes=%lld queued=%.3f "
                   "mpi_begin=%.3f mpi_end=%.3f wait_begin=%.3f wait_end=%.3f\n",
                   static_cast<long long>(b.process), b.inputs.size(),
                   static_cast<long long>(b.bytes), b.queued, b.began, b.ended, waiting, now_ms());
    }
    std::vector<std::vector<Tensor>> out;
    out.reserve(bucket_->outputs.size());
    for (Tensor& t : bucket_->outputs) out.push_back({std::move(t)});
    return out;
  }

 private:
  CommThread& thread_;
  const uint64_t ticket_;
  std::shared_ptr<ThreadedBucket> bucket_;
};

class MpiBackend final : public CollectiveBackend {
 public:
  MpiBackend() {
    // The worker makes MPI calls while the caller runs: MPI must allow calls from any thread one
    // at a time (mu_ serialises them). Without that, buckets go out as MPI_Iallreduce.
    int provided = MPI_THREAD_SINGLE;
    use_comm_thread_ = MPI_Query_thread(&provided) == MPI_SUCCESS &&
                       provided >= MPI_THREAD_SERIALIZED && comm_thread_mode() != 0;
  }

  ~MpiBackend() override {
    comm_.stop();  // its work uses the communicators freed below
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
    require_one_member_per_process(group, inputs.size(), name(), "all_reduce");
    return {reduce_all(group, inputs[0], op, "all_reduce", /*agree_first=*/true)};
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    require_one_member_per_process(group, inputs.size(), name(), "all_gather");
    const Tensor& in = inputs[0];
    const size_t k = static_cast<size_t>(group.size());
    std::unique_lock<std::mutex> lock = exclusive();
    // Only the sizes along `axis` differ between members: their descriptors carry them.
    const std::vector<CollectiveDescriptor> all =
        agree(group, describe_all_gather(in, axis), "all_gather");
    std::vector<int64_t> sizes(k);
    for (size_t p = 0; p < k; ++p) sizes[p] = all[p].free_size;
    MPI_Comm comm = comm_for(ranks_of(group));
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
    Tensor received = byte_buffer(mpi_count(displs.back() + int64_t{counts.back()}, "all_gather"));
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
    if (agreement_on.load(std::memory_order_relaxed)) {
      std::unique_lock<std::mutex> lock = exclusive();
      agree(group, describe_reduce_scatter(in, op, axis), "reduce_scatter");
    }
    if (leading_extent(in, axis) == 1) {
      // Chunks are contiguous: MPI_Reduce_scatter delivers each process only its chunk.
      const int64_t row = n == 0 ? 0 : in.num_elements() / n;
      std::vector<int> counts;
      for (int64_t p = 0; p < k; ++p) {
        counts.push_back(mpi_count(chunk_range(n, k, p).size * row, "reduce_scatter"));
      }
      Tensor out = Tensor::empty(with_dim(in.shape(), axis, own.size), in.dtype(), in.device());
      std::unique_lock<std::mutex> lock = exclusive();
      MPI_Comm comm = comm_for(ranks_of(group));
      check_mpi(MPI_Reduce_scatter(in.raw_data(), out.raw_data(), counts.data(),
                                   mpi_type(in.dtype()), mpi_op(op, in.dtype()), comm),
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

    std::unique_lock<std::mutex> lock = exclusive();
    // Members agree on everything but their sizes along concat_axis, which their descriptors carry.
    const std::vector<CollectiveDescriptor> all =
        agree(group, describe_all_to_all(in, split_axis, concat_axis), "all_to_all");
    std::vector<Shape> shapes;
    for (const CollectiveDescriptor& d : all)
      shapes.push_back(with_dim(in.shape(), concat_axis, d.free_size));
    MPI_Comm comm = comm_for(ranks_of(group));
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
      send = byte_buffer(mpi_count(send_displs.back() + int64_t{send_counts.back()}, "all_to_all"));
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
                           : byte_buffer(mpi_count(recv_displs.back() + int64_t{recv_counts.back()},
                                                   "all_to_all"));
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
    std::unique_lock<std::mutex> lock = exclusive();
    // The root's descriptor carries its dtype and shape to the others.
    const std::vector<CollectiveDescriptor> all =
        agree(group, describe_broadcast(am_root ? &inputs[0] : nullptr, root), "broadcast");
    const CollectiveDescriptor& header = all[static_cast<size_t>(root_rank)];
    if (header.rank > kMaxBroadcastRank) {
      throw_error<CommunicationError>("broadcast", "rank {} exceeds the limit of {}", header.rank,
                                      kMaxBroadcastRank);
    }
    Tensor source = am_root ? inputs[0]
                            : Tensor::empty(header.shape(), static_cast<DType>(header.dtype),
                                            inputs[0].device());
    MPI_Comm comm = comm_for(ranks_of(group));
    check_mpi(
        MPI_Bcast(source.raw_data(), mpi_count(static_cast<int64_t>(source.nbytes()), "broadcast"),
                  MPI_BYTE, root_rank, comm),
        "broadcast", "MPI_Bcast");
    return {source};
  }

  std::unique_ptr<PendingCollective> all_reduce_start(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) override {
    for (const std::vector<Tensor>& members : inputs) {
      require_one_member_per_process(group, members.size(), name(), "all_reduce_start");
    }
    std::vector<Tensor> bucket;
    for (const std::vector<Tensor>& members : inputs) bucket.push_back(members[0]);
    const CollectiveDescriptor described = describe_all_reduce_start(bucket, op);
    if (inputs.empty()) {
      // Nothing to reduce, but a process whose bucket is not empty must not wait for this one.
      if (agreement_on.load(std::memory_order_relaxed)) {
        std::unique_lock<std::mutex> lock = exclusive();
        agree(group, described, "all_reduce_start");
      }
      return std::make_unique<CompletedCollective>(inputs);
    }
    if (use_comm_thread_) return start_on_comm_thread(group, inputs, op, described);
    const DType dtype = inputs[0][0].dtype();
    bool mixed = false;
    for (const std::vector<Tensor>& members : inputs) mixed = mixed || members[0].dtype() != dtype;
    if (mixed) {
      // One MPI call carries one datatype: a mixed bucket agrees, then runs the blocking path.
      if (agreement_on.load(std::memory_order_relaxed)) {
        std::unique_lock<std::mutex> lock = exclusive();
        agree(group, described, "all_reduce_start");
      }
      std::vector<std::vector<Tensor>> results;
      for (const Tensor& in : bucket) {
        results.push_back({reduce_all(group, in, op, "all_reduce_start", /*agree_first=*/false)});
      }
      return std::make_unique<CompletedCollective>(std::move(results));
    }
    // The bucket packed into one buffer (a single tensor is sent from where it is).
    int64_t elements = 0;
    for (const std::vector<Tensor>& members : inputs) elements += members[0].num_elements();
    const int count = mpi_count(elements, "all_reduce_start");
    Tensor send = inputs[0][0];
    if (inputs.size() > 1) {
      send = Tensor::empty({elements}, dtype, inputs[0][0].device());
      char* at = bytes_of(send);
      for (const std::vector<Tensor>& members : inputs) {
        std::memcpy(at, members[0].raw_data(), members[0].nbytes());
        at += members[0].nbytes();
      }
    }
    auto pending = std::make_unique<MpiPending>(mu_, send, inputs);
    std::unique_lock<std::mutex> lock = exclusive();
    if (agreement_on.load(std::memory_order_relaxed)) agree(group, described, "all_reduce_start");
    MPI_Comm comm = comm_for(ranks_of(group));
    check_mpi(MPI_Iallreduce(send.raw_data(), pending->received().raw_data(), count,
                             mpi_type(dtype), mpi_op(op, dtype), comm, pending->request()),
              "all_reduce_start", "MPI_Iallreduce");
    pending->started();
    return pending;
  }

  void barrier(const Group& group) override {
    require_one_member_per_process(group, 1, name(), "barrier");
    std::unique_lock<std::mutex> lock = exclusive();
    if (agreement_on.load(std::memory_order_relaxed)) {
      // Every member has sent its descriptor: the exchange is the barrier.
      agree(group, describe_barrier(), "barrier");
      return;
    }
    check_mpi(MPI_Barrier(comm_for(ranks_of(group))), "barrier", "MPI_Barrier");
  }

 private:
  // Exchanges descriptors with the other members (over the control channel, or through their
  // SharedReducer once they have one) and throws
  // CommunicationError on every member when they disagree (or one has left the job). Returns the
  // members' descriptors in group order. Caller holds mu_, before any MPI call of the collective
  // (even the first use's communicator creation, which would wait for a member that is not
  // coming).
  std::vector<CollectiveDescriptor> agree(const Group& group, const CollectiveDescriptor& mine,
                                          const char* function) {
    const size_t self = static_cast<size_t>(self_rank(group));
    const std::vector<int> ranks = ranks_of(group);
    std::vector<CollectiveDescriptor> all;
    auto shared = reducers_.find(ranks);
    if (shared != reducers_.end() && shared->second.reducer != nullptr) {
      // Processes of one host, once their reducer exists (made by the same call on all of them):
      // through shared memory, asleep while waiting, so that a process that waits for a late one
      // gives the core back instead of polling MPI.
      all.resize(ranks.size());
      shared->second.reducer->exchange(&mine, sizeof(mine), all.data(), [&](int position) {
        const int who = ranks[static_cast<size_t>(position)];
        if (has_departed(who, function)) {
          throw_departed(function, who, ranks[self], mine);
        }
      });
    } else {
      all = exchange_descriptors(ranks, self, mine, function);
    }
    check_agreement(function, all, group.owners, self);
    return all;
  }

  // mu_, once the communication thread has run everything queued before: this process's MPI
  // calls then go out in program order, as on every other process.
  std::unique_lock<std::mutex> exclusive() {
    comm_.drain();
    return std::unique_lock<std::mutex>(mu_);
  }

  // The bucket reduced on the communication thread: through the members' SharedReducer when they
  // share a host, else as one blocking MPI_Allreduce per tensor in order (the calls a blocking
  // all_reduce of each tensor makes, so the same sums, bit for bit), or for two processes as
  // nonblocking ones polled with yields. The choice is the blocking path's, so results match it.
  std::unique_ptr<PendingCollective> start_on_comm_thread(
      const Group& group, const std::vector<std::vector<Tensor>>& inputs, ReduceOp op,
      const CollectiveDescriptor& described) {
    auto bucket = std::make_shared<ThreadedBucket>();
    bucket->process = group.self;
    for (const std::vector<Tensor>& members : inputs) {
      const Tensor& in = members[0];
      mpi_count(in.num_elements(), "all_reduce_start");
      bucket->inputs.push_back(in);
      bucket->outputs.push_back(Tensor::empty(in.shape(), in.dtype(), in.device()));
      bucket->bytes += static_cast<int64_t>(in.nbytes());
    }
    if (overlap_trace_on()) bucket->queued = now_ms();
    const bool yielding = group.size() == 2 && comm_thread_mode() == 2;
    const uint64_t ticket = comm_.submit(
        [this, bucket, group, ranks = ranks_of(group), op, yielding, described]() noexcept {
          ThreadedBucket& b = *bucket;
          if (overlap_trace_on()) b.began = now_ms();
          try {
            SharedReducer* reducer = nullptr;
            {
              std::lock_guard<std::mutex> lock(mu_);
              if (agreement_on.load(std::memory_order_relaxed)) {
                agree(group, described, "all_reduce_start");
              }
              reducer = reducer_for(ranks);
            }
            if (reducer != nullptr) {
              // No MPI call: each process does its share when it runs, sleeps while it waits.
              reducer->all_reduce(b.inputs, b.outputs, op, "all_reduce_start");
              shared_reductions.fetch_add(1, std::memory_order_relaxed);
            } else if (yielding) {
              reduce_bucket_yielding(b, ranks, op);
            } else {
              reduce_bucket_blocking(b, ranks, op);
            }
          } catch (...) {
            b.error = std::current_exception();
          }
          if (overlap_trace_on()) b.ended = now_ms();
        });
    return std::make_unique<ThreadedPending>(comm_, ticket, std::move(bucket));
  }

  // On the communication thread: one MPI_Allreduce per tensor, in order.
  void reduce_bucket_blocking(ThreadedBucket& b, const std::vector<int>& ranks, ReduceOp op) {
    std::lock_guard<std::mutex> lock(mu_);
    MPI_Comm comm = comm_for(ranks);
    for (size_t t = 0; t < b.inputs.size(); ++t) {
      const Tensor& in = b.inputs[t];
      check_mpi(
          MPI_Allreduce(in.raw_data(), b.outputs[t].raw_data(), static_cast<int>(in.num_elements()),
                        mpi_type(in.dtype()), mpi_op(op, in.dtype()), comm),
          "all_reduce_start", "MPI_Allreduce");
    }
  }

  // On the communication thread, for two processes on two hosts: every tensor's MPI_Iallreduce
  // at once, then tests, giving the core away between them. A blocking MPI call spins while it
  // waits for the other process; with no idle core, that spin takes the core from this process's
  // own computation. With two members every algorithm adds the same two terms (a + b == b + a),
  // so the sums are the blocking path's bit for bit.
  void reduce_bucket_yielding(ThreadedBucket& b, const std::vector<int>& ranks, ReduceOp op) {
    std::vector<MPI_Request> requests(b.inputs.size(), MPI_REQUEST_NULL);
    {
      std::lock_guard<std::mutex> lock(mu_);
      MPI_Comm comm = comm_for(ranks);
      for (size_t t = 0; t < b.inputs.size(); ++t) {
        const Tensor& in = b.inputs[t];
        check_mpi(MPI_Iallreduce(in.raw_data(), b.outputs[t].raw_data(),
                                 static_cast<int>(in.num_elements()), mpi_type(in.dtype()),
                                 mpi_op(op, in.dtype()), comm, &requests[t]),
                  "all_reduce_start", "MPI_Iallreduce");
      }
    }
    for (;;) {
      int done = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                              MPI_STATUSES_IGNORE),
                  "all_reduce_start", "MPI_Testall");
      }
      if (done) return;
      std::this_thread::yield();
    }
  }

  // The reduction over every member: through their SharedReducer when they share a host, else
  // MPI_Allreduce.
  // With agree_first, the members first agree on the call (when agreement is on).
  Tensor reduce_all(const Group& group, const Tensor& in, ReduceOp op, const char* function,
                    bool agree_first) {
    Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
    std::unique_lock<std::mutex> lock = exclusive();
    if (agree_first && agreement_on.load(std::memory_order_relaxed)) {
      agree(group, describe_all_reduce(in, op), function);
    }
    MPI_Comm comm = comm_for(ranks_of(group));
    const double began = overlap_trace_on() ? now_ms() : 0;
    if (SharedReducer* reducer = reducer_for(ranks_of(group))) {
      std::vector<Tensor> outputs = {out};
      reducer->all_reduce({in}, outputs, op, function);
      shared_reductions.fetch_add(1, std::memory_order_relaxed);
    } else {
      check_mpi(MPI_Allreduce(in.raw_data(), out.raw_data(), mpi_count(in.num_elements(), function),
                              mpi_type(in.dtype()), mpi_op(op, in.dtype()), comm),
                function, "MPI_Allreduce");
    }
    if (overlap_trace_on()) {
      std::fprintf(stderr,
                   "[overlap-trace] process=%lld blocking bytes=%zu mpi_begin=%.3f "
                   "mpi_end=%.3f\n",
                   static_cast<long long>(group.self), in.nbytes(), began, now_ms());
    }
    return out;
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

  // The SharedReducer of `processes` when all of them run on one host, made on first use (a
  // collective call over them); null for one process, processes on several hosts, no shared
  // memory to be had, or DTENSOR_MPI_SHARED=0. Caller holds mu_.
  SharedReducer* reducer_for(const std::vector<int>& processes) {
    if (processes.size() < 2 || !shared_reducers_on()) return nullptr;
    auto it = reducers_.find(processes);
    if (it != reducers_.end()) return it->second.reducer.get();
    SharedWindow& made = reducers_[processes];
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(
        MPI_Comm_split_type(comm_for(processes), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
        "all_reduce", "MPI_Comm_split_type");
    int size = 0, self = 0;
    MPI_Comm_size(node, &size);
    MPI_Comm_rank(node, &self);
    // Every member sees the same answer: either all share one host or every host has fewer.
    if (size == static_cast<int>(processes.size())) {
      MPI_Info info;
      MPI_Info_create(&info);
      MPI_Info_set(info, "alloc_shared_noncontig", "true");
      void* mine = nullptr;
      const int rc =
          MPI_Win_allocate_shared(static_cast<MPI_Aint>(SharedReducer::segment_bytes(size)), 1,
                                  info, node, &mine, &made.window);
      MPI_Info_free(&info);
      // Without shared memory (no such MPI component, no room for it) all stay on MPI.
      int ok = rc == MPI_SUCCESS ? 1 : 0;
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, node), "all_reduce",
                "MPI_Allreduce");
      if (ok == 1) {
        std::vector<void*> segments(static_cast<size_t>(size));
        for (int p = 0; p < size; ++p) {
          MPI_Aint bytes = 0;
          int unit = 0;
          check_mpi(MPI_Win_shared_query(made.window, p, &bytes, &unit, &segments[p]), "all_reduce",
                    "MPI_Win_shared_query");
        }
        std::memset(mine, 0, SharedReducer::kHeaderBytes);
        check_mpi(MPI_Barrier(node), "all_reduce", "MPI_Barrier");  // every header zeroed
        made.reducer = std::make_unique<SharedReducer>(segments, self);
      } else if (rc == MPI_SUCCESS) {
        MPI_Win_free(&made.window);
      }
    }
    MPI_Comm_free(&node);
    return made.reducer.get();
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

  std::mutex mu_;
  CommThread comm_;
  bool use_comm_thread_ = false;
  std::map<std::vector<int>, MPI_Comm> comms_;
  std::map<std::vector<int>, SharedWindow> reducers_;
  MPI_Op bf16_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  // NaN-propagating max and min: f32 max, f32 min, f64 max, f64 min.
  MPI_Op float_ops_[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_mpi_backend() { return std::make_shared<MpiBackend>(); }

void set_collective_agreement(bool on) { agreement_on.store(on, std::memory_order_relaxed); }

int64_t shared_memory_reductions() { return shared_reductions.load(std::memory_order_relaxed); }

}  // namespace dtensor
