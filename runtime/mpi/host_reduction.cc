#include "runtime/mpi/host_reduction.h"

#include <algorithm>
#include <cstring>

#include "runtime/mpi/fold.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/mpi/mpi_types.h"

namespace dtensor {
namespace {

// Tag of the partial results passed along the hosts (on the group's own communicator).
constexpr int kChainTag = 7179;

}  // namespace

std::unique_ptr<HostReduction> HostReduction::make(MpiSession& session,
                                                   const std::vector<int>& ranks,
                                                   const std::vector<int>& hosts) {
  // Runs of consecutive members on one host: their first positions.
  std::vector<int> firsts;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (i == 0 || hosts[i] != hosts[i - 1]) {
      const bool seen_before = std::find(hosts.begin(), hosts.begin() + static_cast<long>(i),
                                         hosts[i]) != hosts.begin() + static_cast<long>(i);
      if (seen_before) return nullptr;  // a host's members are not consecutive
      firsts.push_back(static_cast<int>(i));
    }
  }
  if (firsts.size() < 2) return nullptr;
  MPI_Comm comm = session.comm_for(ranks);
  int self = 0;
  MPI_Comm_rank(comm, &self);
  std::unique_ptr<HostReduction> plan(new HostReduction(session));
  plan->comm_ = comm;
  plan->hosts_ = static_cast<int>(firsts.size());
  plan->host_ =
      static_cast<int>(std::upper_bound(firsts.begin(), firsts.end(), self) - firsts.begin()) - 1;
  const int first = firsts[static_cast<size_t>(plan->host_)];
  const int end = plan->host_ + 1 < plan->hosts_ ? firsts[static_cast<size_t>(plan->host_ + 1)]
                                                 : static_cast<int>(ranks.size());
  plan->leader_ = self == first;
  if (plan->host_ > 0) plan->previous_leader_ = firsts[static_cast<size_t>(plan->host_ - 1)];
  if (plan->host_ + 1 < plan->hosts_) plan->next_leader_ = end;
  if (end - first >= 2) {
    make_window(session.comm_for(std::vector<int>(ranks.begin() + first, ranks.begin() + end)),
                plan->window_);
  }
  int ok = end - first < 2 || plan->window_.reducer != nullptr ? 1 : 0;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm), "all_reduce",
            "MPI_Allreduce");
  if (ok == 0) return nullptr;  // a window made here stays until MPI_Finalize frees it
  if (plan->leader_) {
    std::vector<int> leaders;
    for (int f : firsts) leaders.push_back(ranks[static_cast<size_t>(f)]);
    plan->leaders_ = session.comm_for(leaders);
  }
  return plan;
}

void HostReduction::all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                               ReduceOp op, const char* function, bool lock_for_mpi) {
  auto mpi_lock = [&] { return lock_for_mpi ? session_.lock() : std::unique_lock<std::mutex>(); };
  auto count_of = [&](const Tensor& t) { return mpi_count(t.num_elements(), function); };
  // 1. This host's terms, the partial result of the hosts before it folded into its leader's.
  std::vector<Tensor> terms = inputs;
  if (leader_ && previous_leader_ >= 0) {
    for (size_t t = 0; t < inputs.size(); ++t) {
      Tensor partial = Tensor::empty(inputs[t].shape(), inputs[t].dtype(), inputs[t].device());
      {
        std::unique_lock<std::mutex> lock = mpi_lock();
        check_mpi(MPI_Recv(partial.raw_data(), count_of(partial), mpi_type(partial.dtype()),
                           previous_leader_, kChainTag, comm_, MPI_STATUS_IGNORE),
                  function, "MPI_Recv");
      }
      fold_into(partial, inputs[t], op);
      terms[t] = std::move(partial);
    }
  }
  // 2. Folded on in shared memory, in member order.
  if (window_.reducer != nullptr) {
    window_.reducer->all_reduce(terms, outputs, op, function);
  } else {
    for (size_t t = 0; t < terms.size(); ++t) {
      std::memcpy(outputs[t].raw_data(), terms[t].raw_data(), terms[t].nbytes());
    }
  }
  // 3. Passed on to the next host; the last host's result to every leader.
  if (!leader_) {
    if (next_leader_ >= 0) {
      // 4. The result from this host's leader, through shared memory.
      std::vector<Tensor> identities;
      for (const Tensor& in : inputs) identities.push_back(identity_like(in, op));
      window_.reducer->all_reduce(identities, outputs, op, function);
    }
    return;
  }
  std::unique_lock<std::mutex> lock = mpi_lock();
  for (Tensor& out : outputs) {
    if (next_leader_ >= 0) {
      check_mpi(MPI_Send(out.raw_data(), count_of(out), mpi_type(out.dtype()), next_leader_,
                         kChainTag, comm_),
                function, "MPI_Send");
    }
  }
  for (Tensor& out : outputs) {
    check_mpi(MPI_Bcast(out.raw_data(), count_of(out), mpi_type(out.dtype()), hosts_ - 1, leaders_),
              function, "MPI_Bcast");
  }
  if (lock.owns_lock()) lock.unlock();
  if (next_leader_ >= 0 && window_.reducer != nullptr) {
    // 4. Shared with this host's other members: the result folded with their identities.
    window_.reducer->all_reduce(outputs, outputs, op, function);
  }
}

}  // namespace dtensor
