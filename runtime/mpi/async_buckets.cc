#include "runtime/mpi/async_buckets.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "runtime/mpi/mpi_check.h"

namespace dtensor {
namespace {

class BucketPending final : public PendingCollective {
 public:
  BucketPending(CommThread& thread, uint64_t ticket, std::shared_ptr<Bucket> bucket)
      : thread_(thread), ticket_(ticket), bucket_(std::move(bucket)) {}

  bool test() override { return thread_.done(ticket_); }

  std::vector<std::vector<Tensor>> wait() override {
    const double waiting = overlap_trace_on() ? trace_clock_ms() : 0;
    thread_.wait(ticket_);
    if (bucket_->error) std::rethrow_exception(bucket_->error);
    if (overlap_trace_on()) {
      const Bucket& b = *bucket_;
      std::fprintf(stderr,
                   "[overlap-trace] process=%lld bucket tensors=%zu bytes=%lld queued=%.3f "
                   "mpi_begin=%.3f mpi_end=%.3f wait_begin=%.3f wait_end=%.3f\n",
                   static_cast<long long>(b.process), b.inputs.size(),
                   static_cast<long long>(b.bytes), b.queued, b.began, b.ended, waiting,
                   trace_clock_ms());
    }
    std::vector<std::vector<Tensor>> out;
    out.reserve(bucket_->outputs.size());
    for (Tensor& t : bucket_->outputs) out.push_back({std::move(t)});
    return out;
  }

 private:
  CommThread& thread_;
  const uint64_t ticket_;
  std::shared_ptr<Bucket> bucket_;
};

}  // namespace

bool overlap_trace_on() {
  static const bool on = [] {
    const char* v = std::getenv("DTENSOR_OVERLAP_TRACE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

double trace_clock_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void trace_blocking(int64_t process, size_t bytes, double began) {
  std::fprintf(stderr,
               "[overlap-trace] process=%lld blocking bytes=%zu mpi_begin=%.3f mpi_end=%.3f\n",
               static_cast<long long>(process), bytes, began, trace_clock_ms());
}

std::unique_ptr<PendingCollective> start_bucket(MpiSession& session, std::string_view backend,
                                                const Group& group,
                                                const std::vector<std::vector<Tensor>>& inputs,
                                                ReduceOp op, BucketReduction reduce) {
  for (const std::vector<Tensor>& members : inputs) {
    require_one_member_per_process(group, members.size(), backend, "all_reduce_start");
  }
  auto bucket = std::make_shared<Bucket>();
  bucket->process = group.self;
  for (const std::vector<Tensor>& members : inputs) {
    const Tensor& in = members[0];
    mpi_count(in.num_elements(), "all_reduce_start");
    bucket->inputs.push_back(in);
    bucket->outputs.push_back(Tensor::empty(in.shape(), in.dtype(), in.device()));
    bucket->bytes += static_cast<int64_t>(in.nbytes());
  }
  const CollectiveDescriptor described = describe_all_reduce_start(bucket->inputs, op);
  if (inputs.empty()) {
    // Nothing to reduce, but a process whose bucket is not empty must not wait for this one.
    if (agreement_enabled()) {
      std::unique_lock<std::mutex> lock = session.exclusive();
      session.agree(group, described, "all_reduce_start");
    }
    return std::make_unique<CompletedCollective>(inputs);
  }
  if (overlap_trace_on()) bucket->queued = trace_clock_ms();
  const uint64_t ticket = session.comm_thread().submit(
      [&session, bucket, group, described, reduce = std::move(reduce)]() noexcept {
        Bucket& b = *bucket;
        if (overlap_trace_on()) b.began = trace_clock_ms();
        try {
          if (agreement_enabled()) {
            std::unique_lock<std::mutex> lock = session.lock();
            session.agree(group, described, "all_reduce_start");
          }
          reduce(b);
        } catch (...) {
          b.error = std::current_exception();
        }
        if (overlap_trace_on()) b.ended = trace_clock_ms();
      });
  return std::make_unique<BucketPending>(session.comm_thread(), ticket, std::move(bucket));
}

void reduce_bucket_over_mpi(MpiSession& session, Bucket& b, const std::vector<int>& ranks,
                            ReduceOp op) {
  if (ranks.size() != 2) {
    std::unique_lock<std::mutex> lock = session.lock();
    MPI_Comm comm = session.comm_for(ranks);
    for (size_t t = 0; t < b.inputs.size(); ++t) {
      const Tensor& in = b.inputs[t];
      check_mpi(
          MPI_Allreduce(in.raw_data(), b.outputs[t].raw_data(), static_cast<int>(in.num_elements()),
                        mpi_type(in.dtype()), session.op_for(op, in.dtype()), comm),
          "all_reduce_start", "MPI_Allreduce");
    }
    return;
  }
  std::vector<MPI_Request> requests(b.inputs.size(), MPI_REQUEST_NULL);
  {
    std::unique_lock<std::mutex> lock = session.lock();
    MPI_Comm comm = session.comm_for(ranks);
    for (size_t t = 0; t < b.inputs.size(); ++t) {
      const Tensor& in = b.inputs[t];
      check_mpi(MPI_Iallreduce(in.raw_data(), b.outputs[t].raw_data(),
                               static_cast<int>(in.num_elements()), mpi_type(in.dtype()),
                               session.op_for(op, in.dtype()), comm, &requests[t]),
                "all_reduce_start", "MPI_Iallreduce");
    }
  }
  for (;;) {
    int done = 0;
    {
      std::unique_lock<std::mutex> lock = session.lock();
      check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                            MPI_STATUSES_IGNORE),
                "all_reduce_start", "MPI_Testall");
    }
    if (done) return;
    std::this_thread::yield();
  }
}

}  // namespace dtensor
