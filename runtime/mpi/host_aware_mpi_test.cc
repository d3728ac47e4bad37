// The host-aware all-reduce (runtime/mpi/host_reduction.h) gives the flat fold's bits: every
// element the left fold over the processes in order, ((v0 + v1) + v2) + ..., however the
// processes are spread over hosts. Run on one machine with DTENSOR_MPI_PROCESSES_PER_HOST (hosts
// by rank) and on network-namespace hosts (tests/multi_host_collectives_test.sh), where the hosts
// come from MPI_Comm_split_type.
#include <mpi.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/mpi/mpi_backend.h"
#include "runtime/mpi/test_groups.h"
#include "runtime/process.h"
#include "runtime/tensor.h"

using namespace dtensor;
using dtensor::testing::everyone;

namespace {

constexpr int64_t kElements = 5000;

// Process p's value at element i: magnitudes from 2^-20 to 2^20 and both signs, so that the
// order in which the processes' values are added shows in the last bits.
template <typename T>
T term(int64_t p, int64_t i) {
  uint64_t h = static_cast<uint64_t>(p * 1000003 + i) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  const double mantissa = static_cast<double>(h % 2001) / 1000.0 - 1.0;
  return static_cast<T>(std::ldexp(mantissa, static_cast<int>((h >> 12) % 41) - 20));
}

template <typename T>
Tensor terms_of(int64_t p, DType dtype) {
  Tensor t = Tensor::empty({kElements}, dtype);
  for (int64_t i = 0; i < kElements; ++i) t.data<T>()[i] = term<T>(p, i);
  return t;
}

// The flat fold: left to right over the processes, in plain arithmetic.
template <typename T>
std::vector<T> left_fold(int64_t processes) {
  std::vector<T> acc(static_cast<size_t>(kElements));
  for (int64_t i = 0; i < kElements; ++i) {
    T a = term<T>(0, i);
    for (int64_t p = 1; p < processes; ++p) a = a + term<T>(p, i);
    acc[static_cast<size_t>(i)] = a;
  }
  return acc;
}

// The fold from the right, v0 + (v1 + (v2 + ...)): another order, whose bits differ somewhere.
template <typename T>
std::vector<T> right_fold(int64_t processes) {
  std::vector<T> out(static_cast<size_t>(kElements));
  for (int64_t i = 0; i < kElements; ++i) {
    T a = term<T>(processes - 1, i);
    for (int64_t p = processes - 2; p >= 0; --p) a = term<T>(p, i) + a;
    out[static_cast<size_t>(i)] = a;
  }
  return out;
}

template <typename T>
bool same_bits(const Tensor& t, const std::vector<T>& expected) {
  return std::memcmp(t.raw_data(), expected.data(), expected.size() * sizeof(T)) == 0;
}

// How many processes share this one's host: by DTENSOR_MPI_PROCESSES_PER_HOST when set, else by
// host name.
int64_t host_mates() {
  const ProcessInfo me = this_process();
  if (const char* k = std::getenv("DTENSOR_MPI_PROCESSES_PER_HOST")) {
    const int64_t per = std::atoll(k);
    const int64_t first = me.index / per * per;
    return std::min(me.count, first + per) - first;
  }
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::vector<char> all(static_cast<size_t>(me.count) * sizeof(name));
  MPI_Allgather(name, sizeof(name), MPI_CHAR, all.data(), sizeof(name), MPI_CHAR, MPI_COMM_WORLD);
  int64_t mates = 0;
  for (int64_t p = 0; p < me.count; ++p) {
    mates += std::string(all.data() + p * sizeof(name)) == name ? 1 : 0;
  }
  return mates;
}

}  // namespace

TEST_CASE("the host-aware all-reduce gives the flat fold's bits, blocking and bucketed") {
  const int64_t count = this_process().count, self = this_process().index;
  REQUIRE(count >= 3);
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  const std::vector<float> expected32 = left_fold<float>(count);
  const std::vector<double> expected64 = left_fold<double>(count);
  // The test can fail: another order of the same terms gives other bits.
  CHECK(std::memcmp(expected32.data(), right_fold<float>(count).data(),
                    expected32.size() * sizeof(float)) != 0);
  CHECK(std::memcmp(expected64.data(), right_fold<double>(count).data(),
                    expected64.size() * sizeof(double)) != 0);

  const int64_t before = shared_memory_reductions();
  const Tensor sum32 =
      backend->all_reduce(everyone(), {terms_of<float>(self, DType::kF32)}, ReduceOp::kSum)[0];
  CHECK(same_bits(sum32, expected32));
  const Tensor sum64 =
      backend->all_reduce(everyone(), {terms_of<double>(self, DType::kF64)}, ReduceOp::kSum)[0];
  CHECK(same_bits(sum64, expected64));
  // Shared memory carried this process's terms exactly when its host has others of the group.
  CHECK(shared_memory_reductions() - before == (host_mates() >= 2 ? 2 : 0));

  std::vector<std::vector<Tensor>> bucket = {{terms_of<double>(self, DType::kF64)},
                                             {terms_of<float>(self, DType::kF32)}};
  std::vector<std::vector<Tensor>> done =
      backend->all_reduce_start(everyone(), bucket, ReduceOp::kSum)->wait();
  REQUIRE(done.size() == 2);
  CHECK(same_bits(done[0][0], expected64));
  CHECK(same_bits(done[1][0], expected32));
}

TEST_CASE("the host-aware all-reduce keeps max's NaN, integers and booleans") {
  const int64_t count = this_process().count, self = this_process().index;
  std::shared_ptr<CollectiveBackend> backend = make_mpi_backend();
  Tensor values = Tensor::empty({4}, DType::kF32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Element 0: a NaN on the last process; 1: -0.0 everywhere; 2: the process; 3: minus it.
  const float mine[4] = {self == count - 1 ? nan : 1.0f, -0.0f, static_cast<float>(self),
                         -static_cast<float>(self)};
  std::memcpy(values.raw_data(), mine, sizeof(mine));
  const Tensor max = backend->all_reduce(everyone(), {values}, ReduceOp::kMax)[0];
  CHECK(std::isnan(max.data<float>()[0]));
  CHECK(std::signbit(max.data<float>()[1]));
  CHECK(max.data<float>()[2] == static_cast<float>(count - 1));
  CHECK(max.data<float>()[3] == 0.0f);
  const Tensor sum = backend->all_reduce(everyone(), {values}, ReduceOp::kSum)[0];
  CHECK(std::signbit(sum.data<float>()[1]));  // -0 + -0 stays -0 through every stage

  Tensor ints = Tensor::empty({2}, DType::kI64);
  ints.data<int64_t>()[0] = self + 1;
  ints.data<int64_t>()[1] = -(int64_t{1} << 40) * self;
  const Tensor int_sum = backend->all_reduce(everyone(), {ints}, ReduceOp::kSum)[0];
  CHECK(int_sum.data<int64_t>()[0] == count * (count + 1) / 2);
  CHECK(int_sum.data<int64_t>()[1] == -(int64_t{1} << 40) * (count * (count - 1) / 2));
  const Tensor int_min = backend->all_reduce(everyone(), {ints}, ReduceOp::kMin)[0];
  CHECK(int_min.data<int64_t>()[0] == 1);

  Tensor flags = Tensor::empty({2}, DType::kBool);
  flags.data<bool>()[0] = self == 1;  // true on one process
  flags.data<bool>()[1] = true;
  const Tensor any = backend->all_reduce(everyone(), {flags}, ReduceOp::kMax)[0];
  const Tensor all = backend->all_reduce(everyone(), {flags}, ReduceOp::kMin)[0];
  CHECK(any.data<bool>()[0]);
  CHECK_FALSE(all.data<bool>()[0]);
  CHECK(all.data<bool>()[1]);
}
