#include "runtime/mpi/host_topology.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/error.h"
#include "runtime/mpi/mpi_check.h"

namespace dtensor {
namespace {

// DTENSOR_MPI_PROCESSES_PER_HOST, or 0 when unset.
int processes_per_host_override() {
  static const int k = [] {
    const char* v = std::getenv("DTENSOR_MPI_PROCESSES_PER_HOST");
    if (v == nullptr || v[0] == '\0') return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1 << 20) {
      throw_error<InvalidArgumentError>("hosts_of",
                                        "DTENSOR_MPI_PROCESSES_PER_HOST must be a whole number "
                                        ">= 1, got '{}'",
                                        v);
    }
    return static_cast<int>(n);
  }();
  return k;
}

}  // namespace

std::vector<int> hosts_of(MPI_Comm comm, const std::vector<int>& ranks) {
  std::vector<int> hosts(ranks.size());
  if (const int k = processes_per_host_override(); k > 0) {
    for (size_t i = 0; i < ranks.size(); ++i) hosts[i] = ranks[i] / k * k;
    return hosts;
  }
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "all_reduce",
            "MPI_Comm_split_type");
  int self = 0;
  MPI_Comm_rank(comm, &self);
  int mine = ranks[static_cast<size_t>(self)];
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &mine, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  check_mpi(rc, "all_reduce", "MPI_Allreduce");
  check_mpi(MPI_Allgather(&mine, 1, MPI_INT, hosts.data(), 1, MPI_INT, comm), "all_reduce",
            "MPI_Allgather");
  return hosts;
}

void make_window(MPI_Comm comm, SharedWindow& made) {
  int members = 0;
  MPI_Comm_size(comm, &members);
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "all_reduce",
            "MPI_Comm_split_type");
  int size = 0, self = 0;
  MPI_Comm_size(node, &size);
  MPI_Comm_rank(node, &self);
  // Every member sees the same answer: either all share one node or every node has fewer.
  if (size == members) {
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void* mine = nullptr;
    const int rc =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(SharedReducer::segment_bytes(size)), 1, info,
                                node, &mine, &made.window);
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
}

}  // namespace dtensor
