#include "runtime/mpi/control_channel.h"

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "runtime/error.h"
#include "runtime/mpi/mpi_check.h"

namespace dtensor {
namespace {

// Tags on MPI_COMM_WORLD ("DT" and one more), apart from any other point-to-point traffic.
constexpr int kAgreementTag = 0x4454;
constexpr int kDepartureTag = 0x4455;

std::mutex channel_mu;
std::set<int> departed;  // guarded by channel_mu

// Takes in the departure announcements that have arrived. Caller holds channel_mu.
void receive_departures(const char* function) {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kDepartureTag, MPI_COMM_WORLD, &arrived, &status),
              function, "MPI_Iprobe");
    if (!arrived) return;
    int who = 0;
    check_mpi(MPI_Recv(&who, 1, MPI_INT, status.MPI_SOURCE, kDepartureTag, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE),
              function, "MPI_Recv");
    departed.insert(status.MPI_SOURCE);
  }
}

// The first member of `processes` that has departed, or -1. Caller holds channel_mu.
int departed_member(const std::vector<int>& processes) {
  for (int p : processes) {
    if (departed.count(p) != 0) return p;
  }
  return -1;
}

// The requests of one exchange and the buffers they use. Left to MPI, never freed, when a
// member departs halfway: a send may still be reading `mine`.
struct Exchange {
  CollectiveDescriptor mine;
  std::vector<CollectiveDescriptor> all;
  std::vector<MPI_Request> receives, sends;
};

}  // namespace

void throw_departed(const char* function, int who, int self, const CollectiveDescriptor& mine) {
  throw_error<CommunicationError>(
      function,
      "process {} has finished its program (its runtime shut down) while process {} (this one) "
      "waits for it in {}; every process must make the same collective calls, in the same order",
      who, self, mine.to_string());
}

bool has_departed(int process, const char* function) {
  std::lock_guard<std::mutex> lock(channel_mu);
  receive_departures(function);
  return departed.count(process) != 0;
}

std::vector<CollectiveDescriptor> exchange_descriptors(const std::vector<int>& processes,
                                                       size_t self,
                                                       const CollectiveDescriptor& mine,
                                                       const char* function) {
  std::lock_guard<std::mutex> lock(channel_mu);
  const int me = processes[self];
  if (const int who = departed_member(processes); who >= 0) {
    throw_departed(function, who, me, mine);
  }
  auto x = std::make_unique<Exchange>();
  x->mine = mine;
  x->all.resize(processes.size());
  x->all[self] = mine;
  std::vector<int> sources;  // the process each receive waits for
  constexpr int kWords = CollectiveDescriptor::kWords;
  for (size_t p = 0; p < processes.size(); ++p) {
    if (p == self) continue;
    x->receives.emplace_back();
    sources.push_back(processes[p]);
    check_mpi(MPI_Irecv(&x->all[p], kWords, MPI_INT64_T, processes[p], kAgreementTag,
                        MPI_COMM_WORLD, &x->receives.back()),
              function, "MPI_Irecv");
  }
  for (size_t p = 0; p < processes.size(); ++p) {
    if (p == self) continue;
    x->sends.emplace_back();
    check_mpi(MPI_Isend(&x->mine, kWords, MPI_INT64_T, processes[p], kAgreementTag, MPI_COMM_WORLD,
                        &x->sends.back()),
              function, "MPI_Isend");
  }
  using Clock = std::chrono::steady_clock;
  Clock::time_point polled = Clock::now();
  size_t pending = x->receives.size();
  for (int round = 0; pending > 0; ++round) {
    for (MPI_Request& r : x->receives) {
      if (r == MPI_REQUEST_NULL) continue;
      int done = 0;
      check_mpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE), function, "MPI_Test");
      if (done) --pending;  // MPI_Test set r to MPI_REQUEST_NULL
    }
    if (pending == 0) break;
    if (round < 256) continue;  // a process that is in step answers within microseconds
    const Clock::time_point now = Clock::now();
    if (now - polled > std::chrono::milliseconds(1)) {
      polled = now;
      receive_departures(function);
      // A member that sent its descriptor before it left is not the one this process waits for.
      int who = -1;
      for (size_t i = 0; i < sources.size() && who < 0; ++i) {
        if (x->receives[i] != MPI_REQUEST_NULL && departed.count(sources[i]) != 0) who = sources[i];
      }
      if (who >= 0) {
        for (MPI_Request& r : x->receives) {
          if (r == MPI_REQUEST_NULL) continue;
          MPI_Cancel(&r);
          MPI_Request_free(&r);
        }
        for (MPI_Request& r : x->sends) {
          if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        }
        x.release();  // MPI may still write into or read from it
        throw_departed(function, who, me, mine);
      }
    }
    std::this_thread::yield();
  }
  check_mpi(MPI_Waitall(static_cast<int>(x->sends.size()), x->sends.data(), MPI_STATUSES_IGNORE),
            function, "MPI_Waitall");
  return std::move(x->all);
}

void depart_from_job() {
  std::lock_guard<std::mutex> lock(channel_mu);
  int me = 0, size = 1;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &me), "Runtime", "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "Runtime", "MPI_Comm_size");
  std::vector<MPI_Request> sends;
  for (int q = 0; q < size; ++q) {
    if (q == me) continue;
    sends.emplace_back();
    check_mpi(MPI_Isend(&me, 1, MPI_INT, q, kDepartureTag, MPI_COMM_WORLD, &sends.back()),
              "Runtime", "MPI_Isend");
  }
  for (;;) {
    receive_departures("Runtime");
    if (static_cast<int>(departed.size()) >= size - 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  check_mpi(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE),
            "Runtime", "MPI_Waitall");
  departed.clear();  // for a later MPI job in this process (tests)
}

}  // namespace dtensor
