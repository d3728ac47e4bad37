// Which processes of a group share a host, and shared memory among them.
//
// A host is what MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) calls a node: processes that can map
// one memory window. For tests on one machine, DTENSOR_MPI_PROCESSES_PER_HOST=k overrides it:
// MPI_COMM_WORLD ranks [h*k, (h+1)*k) are host h (shared memory is still to be had among all of
// them, so each host's window works as on a real host).
//
// Caller holds the MPI session's lock (runtime/mpi/mpi_session.h): these are MPI calls.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "runtime/mpi/shared_reducer.h"

namespace dtensor {

// The host of every member of `comm` (its ranks in order; `ranks` their MPI_COMM_WORLD ranks),
// named by the lowest MPI_COMM_WORLD rank on it. Collective over `comm` unless overridden.
std::vector<int> hosts_of(MPI_Comm comm, const std::vector<int>& ranks);

// A SharedReducer over an MPI shared-memory window (kept until MPI_Finalize frees it: freeing it
// earlier would be a collective call in a destructor).
struct SharedWindow {
  MPI_Win window = MPI_WIN_NULL;
  std::unique_ptr<SharedReducer> reducer;
};

// Makes `made` over the members of `comm` when all of them share one node and the window can be
// had (collective over `comm`; every member sees the same outcome); leaves it empty otherwise.
void make_window(MPI_Comm comm, SharedWindow& made);

}  // namespace dtensor
