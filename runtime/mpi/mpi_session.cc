#include "runtime/mpi/mpi_session.h"

#include <algorithm>

#include "runtime/mpi/control_channel.h"
#include "runtime/mpi/mpi_check.h"

namespace dtensor {
namespace {

// Tag for MPI_Comm_create_group: creations are serialised, so one tag serves all of them.
constexpr int kCreateGroupTag = 7177;

static_assert(sizeof(CollectiveDescriptor) <= SharedReducer::kExchangeBytes,
              "a descriptor must fit the shared-memory exchange");

std::atomic<bool> agreement_on{true};

}  // namespace

std::vector<int> ranks_of(const Group& group) {
  return std::vector<int>(group.owners.begin(), group.owners.end());
}

int self_rank(const Group& group) {
  return static_cast<int>(std::find(group.owners.begin(), group.owners.end(), group.self) -
                          group.owners.begin());
}

bool agreement_enabled() { return agreement_on.load(std::memory_order_relaxed); }

void set_agreement_enabled(bool on) { agreement_on.store(on, std::memory_order_relaxed); }

MpiSession::MpiSession() {
  int provided = MPI_THREAD_SINGLE;
  threaded_ = MPI_Query_thread(&provided) == MPI_SUCCESS && provided >= MPI_THREAD_SERIALIZED;
}

MpiSession::~MpiSession() {
  comm_.stop();  // its work uses the communicators freed below
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [processes, comm] : comms_) MPI_Comm_free(&comm);
}

std::unique_lock<std::mutex> MpiSession::exclusive() {
  comm_.drain();
  return std::unique_lock<std::mutex>(mu_);
}

MPI_Comm MpiSession::comm_for(const std::vector<int>& processes) {
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

void MpiSession::route_agreement(const std::vector<int>& processes, SharedReducer* reducer) {
  routes_[processes] = reducer;
}

std::vector<CollectiveDescriptor> MpiSession::agree(const Group& group,
                                                    const CollectiveDescriptor& mine,
                                                    const char* function) {
  const size_t self = static_cast<size_t>(self_rank(group));
  const std::vector<int> ranks = ranks_of(group);
  std::vector<CollectiveDescriptor> all;
  auto route = routes_.find(ranks);
  if (route != routes_.end()) {
    // Through shared memory, asleep while waiting, so that a process that waits for a late one
    // gives the core back instead of polling MPI.
    all.resize(ranks.size());
    route->second->exchange(&mine, sizeof(mine), all.data(), [&](int position) {
      const int who = ranks[static_cast<size_t>(position)];
      if (has_departed(who, function)) throw_departed(function, who, ranks[self], mine);
    });
  } else {
    all = exchange_descriptors(ranks, self, mine, function);
  }
  check_agreement(function, all, group.owners, self);
  return all;
}

}  // namespace dtensor
