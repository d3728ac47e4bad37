// SharedReducer between 2, 3 and 4 real processes (fork) over a real shared mapping: all get the
// same, expected bits (a fold in process order) for every dtype and op, buckets larger than an
// area, empty tensors and buckets; different buckets throw on every process; a process that
// waits sleeps instead of spinning.
#include "runtime/mpi/shared_reducer.h"

// Its own main: //tests:catch_main is not visible from this package.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"

using namespace dtensor;

namespace {

// Runs body(reducer, 0) here and body(reducer, p) in forked children p = 1 .. processes-1 over
// one shared mapping; returns whether each process's body returned true (a child's through its
// exit status).
std::vector<bool> on_processes(int processes,
                               const std::function<bool(SharedReducer&, int)>& body) {
  const size_t bytes = SharedReducer::segment_bytes(processes);
  const size_t all = bytes * static_cast<size_t>(processes);
  void* map = mmap(nullptr, all, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(map != MAP_FAILED);  // anonymous shared memory comes zeroed
  std::vector<void*> segments;
  for (int p = 0; p < processes; ++p) segments.push_back(static_cast<char*>(map) + p * bytes);
  auto run = [&](int p) {
    SharedReducer reducer(segments, p);
    try {
      return body(reducer, p);
    } catch (...) {
      return false;
    }
  };
  std::vector<pid_t> children;
  for (int p = 1; p < processes; ++p) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) _exit(run(p) ? 0 : 1);
    children.push_back(child);
  }
  std::vector<bool> ok = {run(0)};
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    ok.push_back(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  munmap(map, all);
  return ok;
}

// Process p's value of element i, as a double the dtype then rounds or wraps.
double value(int p, int64_t i, DType dtype) {
  switch (dtype) {
    case DType::kI32:
      return i % 7 == 0 ? (p == 0 ? 2147483000.0 : 1000.0) : static_cast<double>(i * 3 - p * 500);
    case DType::kI64:
      return static_cast<double>(i * 100003 - p * 7);
    case DType::kBool:
      return (i + p) % 3 == 0 ? 1 : 0;
    default:
      return std::sin(0.37 * static_cast<double>(i) + p) * (1.0 + p * 0.25);
  }
}

template <typename T>
T as(double v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<int32_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
Tensor filled(int p, int64_t n, DType dtype, bool nans) {
  Tensor t = Tensor::empty({n}, dtype);
  T* d = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i) d[i] = as<T>(value(p, i, dtype));
  if constexpr (std::is_floating_point_v<T>) {
    if (nans && n > 20) d[3 + 7 * p] = std::numeric_limits<T>::quiet_NaN();
  }
  return t;
}

template <typename T>
T combined(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMin ? (a && b) : (a || b);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    if (op == ReduceOp::kSum) {
      return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    }
    return op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::kSum) return a + b;
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
    return op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
  } else {
    if (op == ReduceOp::kSum) return a + b;
    return op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
  }
}

// The fold in process order (bf16 in f32, rounded once).
template <typename T>
T expected(const std::vector<T>& values, ReduceOp op) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    float acc = static_cast<float>(values[0]);
    for (size_t p = 1; p < values.size(); ++p) {
      acc = combined(acc, static_cast<float>(values[p]), op);
    }
    return BFloat16(acc);
  } else {
    T acc = values[0];
    for (size_t p = 1; p < values.size(); ++p) acc = combined(acc, values[p], op);
    return acc;
  }
}

template <typename T>
bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Reduces tensors of `sizes` elements of `dtype` and checks every element against expected().
template <typename T>
bool reduce_and_check(SharedReducer& reducer, int p, int processes, DType dtype,
                      const std::vector<int64_t>& sizes, ReduceOp op) {
  const bool nans = op != ReduceOp::kSum;
  std::vector<Tensor> in, out;
  for (int64_t n : sizes) {
    in.push_back(filled<T>(p, n, dtype, nans));
    out.push_back(Tensor::empty({n}, dtype));
  }
  reducer.all_reduce(in, out, op, "all_reduce");
  for (size_t t = 0; t < sizes.size(); ++t) {
    std::vector<Tensor> each;
    for (int q = 0; q < processes; ++q) each.push_back(filled<T>(q, sizes[t], dtype, nans));
    for (int64_t i = 0; i < sizes[t]; ++i) {
      std::vector<T> values;
      for (const Tensor& e : each) values.push_back(static_cast<const T*>(e.raw_data())[i]);
      if (!same(static_cast<const T*>(out[t].raw_data())[i], expected(values, op))) return false;
    }
  }
  return true;
}

bool reduce_and_check(SharedReducer& reducer, int p, int processes, DType dtype,
                      const std::vector<int64_t>& sizes, ReduceOp op) {
  return visit_dtype(dtype, [&](auto zero) {
    return reduce_and_check<decltype(zero)>(reducer, p, processes, dtype, sizes, op);
  });
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

bool all_true(const std::vector<bool>& ok) {
  return std::all_of(ok.begin(), ok.end(), [](bool b) { return b; });
}

TEST_CASE("SharedReducer sums buckets bigger than an area, with empty and odd-sized tensors") {
  for (int processes : {2, 3, 4}) {
    CAPTURE(processes);
    // Over three areas' worth of floats in one tensor, so both areas are reused.
    const int64_t big = static_cast<int64_t>(3 * SharedReducer::area_bytes(processes) / 4) + 777;
    const std::vector<int64_t> sizes = {3, 0, 1, big, 1001};
    CHECK(all_true(on_processes(processes, [&](SharedReducer& reducer, int p) {
      for (int round = 0; round < 3; ++round) {
        if (!reduce_and_check(reducer, p, processes, DType::kF32, sizes, ReduceOp::kSum)) {
          return false;
        }
      }
      return true;
    })));
  }
}

TEST_CASE("SharedReducer gives every process the fold in process order for every dtype and op") {
  for (int processes : {2, 3, 4}) {
    CAPTURE(processes);
    CHECK(all_true(on_processes(processes, [&](SharedReducer& reducer, int p) {
      for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64,
                          DType::kBool}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
          if (!reduce_and_check(reducer, p, processes, dtype, {1001, 16, 2}, op)) return false;
        }
      }
      return true;
    })));
  }
}

TEST_CASE("SharedReducer meets the other processes for empty buckets too") {
  CHECK(all_true(on_processes(3, [](SharedReducer& reducer, int p) {
    std::vector<Tensor> none;
    reducer.all_reduce({}, none, ReduceOp::kSum, "all_reduce");
    std::vector<Tensor> empty = {Tensor::empty({0}, DType::kF32)};
    reducer.all_reduce({Tensor::empty({0}, DType::kF32)}, empty, ReduceOp::kSum, "all_reduce");
    return reduce_and_check(reducer, p, 3, DType::kF32, {5}, ReduceOp::kSum);
  })));
}

TEST_CASE("SharedReducer throws on every process when one's bucket differs, then goes on") {
  CHECK(all_true(on_processes(3, [](SharedReducer& reducer, int p) {
    const int64_t n = p == 2 ? 11 : 10;
    std::vector<Tensor> out = {Tensor::empty({n}, DType::kF32)};
    std::string message;
    try {
      reducer.all_reduce({Tensor::zeros({n}, DType::kF32)}, out, ReduceOp::kSum,
                         "all_reduce_start");
    } catch (const CommunicationError& e) {
      message = e.what();
    }
    const std::string want =
        "[all_reduce_start] the processes reduce different tensors (this process: 1 tensors, " +
        std::to_string(n) +
        " elements); every process must make the same collective calls, with the same shapes, "
        "dtypes and op, in the same order";
    if (message != want) return false;
    // All stay in step: the next matching bucket reduces normally.
    return reduce_and_check(reducer, p, 3, DType::kF64, {9}, ReduceOp::kSum);
  })));
}

TEST_CASE("SharedReducer waits asleep: a process waiting 100 ms for another uses little CPU") {
  CHECK(all_true(on_processes(2, [](SharedReducer& reducer, int p) {
    if (p == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return reduce_and_check(reducer, p, 2, DType::kF32, {64}, ReduceOp::kSum);
    }
    const double cpu = thread_cpu_ms();
    const bool ok = reduce_and_check(reducer, p, 2, DType::kF32, {64}, ReduceOp::kSum);
    // A spinning wait would burn about 100 ms of CPU here.
    return ok && thread_cpu_ms() - cpu < 40;
  })));
}
