// HostReduction: the host-aware all-reduce of a group whose processes span several hosts, the
// processes of each host consecutive in group order (as ranks are placed by slot, and meshes own
// contiguous blocks of devices).
//
// The order, the same for any number of hosts and processes per host: every element is the left
// fold over the members in group order, ((v0 op v1) op v2) op ..., which is also the order of the
// SharedReducer on one host (runtime/mpi/shared_reducer.h). So a group's all-reduce gives the
// same bits whether its processes sit on one host, on several, or one per host. (bf16 is the
// exception: it folds in f32 and rounds to bf16 once per host instead of once.)
//
// How: host 0's processes fold their terms in shared memory; host 0's leader (its first member)
// sends the partial result to host 1's leader, which folds it with its own term (partial op v)
// before host 1's processes fold on in shared memory; and so on along the hosts. The last host
// then holds the result; its leader broadcasts it to the other leaders over MPI, and each leader
// shares it with its host through shared memory (a fold with the op's identity, which leaves its
// bits alone). Network traffic: hosts - 1 messages along the chain plus one broadcast among the
// leaders, each the whole bucket; its latency grows with the number of hosts.
//
// Thread-safety: one call at a time (the MPI backend's lock or its communication thread).
#pragma once

#include <mpi.h>

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/mpi/host_topology.h"
#include "runtime/mpi/mpi_session.h"
#include "runtime/reduce_op.h"
#include "runtime/tensor.h"

namespace dtensor {

class HostReduction {
 public:
  // Collective over the group (MPI_COMM_WORLD ranks `ranks` in group order, `hosts` their hosts
  // from hosts_of), under the session's lock. Null, on every member alike, when the group is on
  // one host, when a host's members are not consecutive in group order, or when a host with
  // several of them cannot have a shared-memory window.
  static std::unique_ptr<HostReduction> make(MpiSession& session, const std::vector<int>& ranks,
                                             const std::vector<int>& hosts);

  // outputs[i] = the fold over every member of inputs[i] (outputs allocated by the caller, in
  // inputs' shapes and dtypes). With lock_for_mpi, each MPI call takes the session's lock (on the
  // communication thread); otherwise the caller holds it. `function` names the caller in errors.
  void all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, ReduceOp op,
                  const char* function, bool lock_for_mpi);

  // Whether this process's host has several members of the group (its terms meet in shared
  // memory).
  bool shares_memory() const { return window_.reducer != nullptr; }

 private:
  HostReduction(MpiSession& session) : session_(session) {}

  MpiSession& session_;
  MPI_Comm comm_ = MPI_COMM_NULL;     // the group's
  MPI_Comm leaders_ = MPI_COMM_NULL;  // the hosts' leaders', on leaders only
  int host_ = 0, hosts_ = 0;          // this process's host among the group's, their count
  int previous_leader_ = -1, next_leader_ = -1;  // group positions, -1 for none
  bool leader_ = false;
  SharedWindow window_;  // this host's members' (none for a host of one)
};

}  // namespace dtensor
