// The MPI backend on several hosts (run by tools/netns_cluster.sh, each host a network namespace
// with its own host name): the processes really are on distinct hosts, MPI_Comm_split_type finds
// them, an all-reduce over all of them takes the host-aware path (shared memory within a host of
// several, MPI between hosts), one among the processes of one host goes through shared memory
// alone, and one over one process of each host through MPI alone. DTENSOR_EXPECT_HOSTS names how
// many hosts the job spans.
#include <mpi.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/mpi/mpi_backend.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;

namespace {

// This process's host name and network namespace (the link /proc/self/ns/net points to).
std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string net_namespace() {
  char target[256] = {};
  const ssize_t n = readlink("/proc/self/ns/net", target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

// Every process's string, in process order.
std::vector<std::string> gather(const std::string& mine) {
  const int count = static_cast<int>(this_process().count);
  char buffer[256] = {};
  mine.copy(buffer, sizeof(buffer) - 1);
  std::vector<char> all(static_cast<size_t>(count) * sizeof(buffer));
  MPI_Allgather(buffer, sizeof(buffer), MPI_CHAR, all.data(), sizeof(buffer), MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int p = 0; p < count; ++p) out.emplace_back(all.data() + p * sizeof(buffer));
  return out;
}

Group group_of(const std::vector<int64_t>& processes) {
  Group g;
  for (const int64_t p : processes) {
    g.devices.push_back(p);
    g.owners.push_back(p);
  }
  g.self = this_process().index;
  return g;
}

Tensor filled(float value, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value + static_cast<float>(i);
  return t;
}

}  // namespace

TEST_CASE("processes on distinct hosts have distinct host names and network namespaces") {
  const char* expect = std::getenv("DTENSOR_EXPECT_HOSTS");
  REQUIRE(expect != nullptr);
  const std::vector<std::string> names = gather(host_name());
  const std::vector<std::string> spaces = gather(net_namespace());
  const std::set<std::string> distinct_names(names.begin(), names.end());
  CHECK(static_cast<int>(distinct_names.size()) == std::atoi(expect));
  // One host name per namespace and the other way round.
  for (size_t p = 0; p < names.size(); ++p) {
    for (size_t q = 0; q < names.size(); ++q) {
      INFO("processes " << p << " (" << names[p] << ", " << spaces[p] << ") and " << q << " ("
                        << names[q] << ", " << spaces[q] << ")");
      CHECK((names[p] == names[q]) == (spaces[p] == spaces[q]));
    }
  }
  char processor[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(processor, &length);
  CHECK(std::string(processor, static_cast<size_t>(length)) == host_name());
}

TEST_CASE("an all-reduce across hosts meets in shared memory within each host, MPI between") {
  const std::vector<std::string> names = gather(host_name());
  const int64_t count = this_process().count, self = this_process().index;
  std::map<std::string, std::vector<int64_t>> by_host;
  for (int64_t p = 0; p < count; ++p) by_host[names[static_cast<size_t>(p)]].push_back(p);
  REQUIRE(by_host.size() >= 2);
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const int64_t n = 1000;

  // Everyone: several hosts, so the host-aware reduction: through shared memory on a host of
  // several processes (runtime/mpi/host_reduction.h).
  const std::vector<int64_t>& local = by_host[names[static_cast<size_t>(self)]];
  std::vector<int64_t> all;
  for (int64_t p = 0; p < count; ++p) all.push_back(p);
  int64_t before = shared_memory_reductions();
  const Tensor sum = backend->all_reduce(group_of(all), {filled(1.0f, n)}, ReduceOp::kSum)[0];
  CHECK(shared_memory_reductions() == before + (local.size() >= 2 ? 1 : 0));
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    REQUIRE(sum.data<float>()[i] == static_cast<float>(count) * (1.0f + static_cast<float>(i)));
  }

  // The processes of this host: shared memory when there are two or more of them.
  before = shared_memory_reductions();
  const Tensor local_sum =
      backend->all_reduce(group_of(local), {filled(2.0f, n)}, ReduceOp::kSum)[0];
  CHECK(shared_memory_reductions() == before + (local.size() >= 2 ? 1 : 0));
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    REQUIRE(local_sum.data<float>()[i] ==
            static_cast<float>(local.size()) * (2.0f + static_cast<float>(i)));
  }

  // One process of each host: several hosts again, so MPI.
  std::vector<int64_t> firsts;
  for (const auto& [name, processes] : by_host) firsts.push_back(processes.front());
  std::sort(firsts.begin(), firsts.end());
  if (std::find(firsts.begin(), firsts.end(), self) != firsts.end()) {
    before = shared_memory_reductions();
    backend->all_reduce(group_of(firsts), {filled(3.0f, n)}, ReduceOp::kSum);
    CHECK(shared_memory_reductions() == before);
  }
  backend->barrier(group_of(all));
}
