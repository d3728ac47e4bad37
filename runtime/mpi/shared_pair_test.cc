// SharedPair between two real processes (fork) over a real shared mapping: both get the same,
// expected bits for every dtype and op, buckets larger than an area, empty tensors and buckets;
// different buckets throw on both sides; a process that waits sleeps instead of spinning.
#include "runtime/mpi/shared_pair.h"

// Its own main: //tests:catch_main is not visible from this package.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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

#include "runtime/error.h"

using namespace dtensor;

namespace {

// Runs body(pair, 0) here and body(pair, 1) in a forked child over one shared mapping; returns
// whether each side's body returned true (the child's through its exit status).
std::pair<bool, bool> on_two_processes(const std::function<bool(SharedPair&, int)>& body) {
  const size_t bytes = SharedPair::segment_bytes();
  void* map = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(map != MAP_FAILED);  // anonymous shared memory comes zeroed
  char* base = static_cast<char*>(map);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    SharedPair pair(base + bytes, base, 1);
    bool ok = false;
    try {
      ok = body(pair, 1);
    } catch (...) {
    }
    _exit(ok ? 0 : 1);
  }
  SharedPair pair(base, base + bytes, 0);
  bool ok = false;
  try {
    ok = body(pair, 0);
  } catch (...) {
  }
  int status = 0;
  waitpid(child, &status, 0);
  munmap(map, 2 * bytes);
  return {ok, WIFEXITED(status) && WEXITSTATUS(status) == 0};
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
    if (nans && n > 10) d[p == 0 ? 3 : 10] = std::numeric_limits<T>::quiet_NaN();
  }
  return t;
}

template <typename T>
T expected(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMin ? (a && b) : (a || b);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const float x = static_cast<float>(a), y = static_cast<float>(b);
    if (op == ReduceOp::kSum) return BFloat16(x + y);
    return BFloat16(op == ReduceOp::kMax ? std::fmax(x, y) : std::fmin(x, y));
  } else if constexpr (std::is_same_v<T, int32_t>) {
    if (op == ReduceOp::kSum) return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
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

template <typename T>
bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  }
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Reduces tensors of `sizes` elements of `dtype` and checks every element against expected().
template <typename T>
bool reduce_and_check(SharedPair& pair, int p, DType dtype, const std::vector<int64_t>& sizes,
                      ReduceOp op) {
  const bool nans = op != ReduceOp::kSum;
  std::vector<Tensor> in, out;
  for (int64_t n : sizes) {
    in.push_back(filled<T>(p, n, dtype, nans));
    out.push_back(Tensor::empty({n}, dtype));
  }
  pair.all_reduce(in, out, op, "all_reduce");
  for (size_t t = 0; t < sizes.size(); ++t) {
    const Tensor zero = filled<T>(0, sizes[t], dtype, nans);
    const Tensor one = filled<T>(1, sizes[t], dtype, nans);
    for (int64_t i = 0; i < sizes[t]; ++i) {
      const T want = expected(static_cast<const T*>(zero.raw_data())[i],
                              static_cast<const T*>(one.raw_data())[i], op);
      if (!same(static_cast<const T*>(out[t].raw_data())[i], want)) return false;
    }
  }
  return true;
}

bool reduce_and_check(SharedPair& pair, int p, DType dtype, const std::vector<int64_t>& sizes,
                      ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return reduce_and_check<float>(pair, p, dtype, sizes, op);
    case DType::kF64:
      return reduce_and_check<double>(pair, p, dtype, sizes, op);
    case DType::kBF16:
      return reduce_and_check<BFloat16>(pair, p, dtype, sizes, op);
    case DType::kI32:
      return reduce_and_check<int32_t>(pair, p, dtype, sizes, op);
    case DType::kI64:
      return reduce_and_check<int64_t>(pair, p, dtype, sizes, op);
    case DType::kBool:
      return reduce_and_check<bool>(pair, p, dtype, sizes, op);
  }
  return false;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace

TEST_CASE("SharedPair sums buckets bigger than an area, with empty and odd-sized tensors") {
  // 2.6M floats: the big tensor spans three 4 MiB areas, so both areas are reused.
  const std::vector<int64_t> sizes = {3, 0, 1, 2'600'000, 1001};
  const auto [zero, one] = on_two_processes([&](SharedPair& pair, int p) {
    for (int round = 0; round < 3; ++round) {
      if (!reduce_and_check(pair, p, DType::kF32, sizes, ReduceOp::kSum)) return false;
    }
    return true;
  });
  CHECK(zero);
  CHECK(one);
}

TEST_CASE("SharedPair gives both processes process 0 op process 1 for every dtype and op") {
  const auto [zero, one] = on_two_processes([](SharedPair& pair, int p) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI32, DType::kI64,
                        DType::kBool}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        if (!reduce_and_check(pair, p, dtype, {1001, 16}, op)) return false;
      }
    }
    return true;
  });
  CHECK(zero);
  CHECK(one);
}

TEST_CASE("SharedPair meets the other process for empty buckets too") {
  const auto [zero, one] = on_two_processes([](SharedPair& pair, int p) {
    std::vector<Tensor> none;
    pair.all_reduce({}, none, ReduceOp::kSum, "all_reduce");
    std::vector<Tensor> empty = {Tensor::empty({0}, DType::kF32)};
    pair.all_reduce({Tensor::empty({0}, DType::kF32)}, empty, ReduceOp::kSum, "all_reduce");
    return reduce_and_check(pair, p, DType::kF32, {5}, ReduceOp::kSum);
  });
  CHECK(zero);
  CHECK(one);
}

TEST_CASE("SharedPair throws on both processes when their buckets differ, then goes on") {
  const auto [zero, one] = on_two_processes([](SharedPair& pair, int p) {
    const int64_t n = p == 0 ? 10 : 11;
    std::vector<Tensor> out = {Tensor::empty({n}, DType::kF32)};
    std::string message;
    try {
      pair.all_reduce({Tensor::zeros({n}, DType::kF32)}, out, ReduceOp::kSum, "all_reduce_start");
    } catch (const CommunicationError& e) {
      message = e.what();
    }
    const std::string want =
        "[all_reduce_start] the two processes reduce different tensors (this process: 1 tensors, " +
        std::to_string(n) +
        " elements); every process must make the same collective calls, with the same "
        "shapes, dtypes and op, in the same order";
    if (message != want) return false;
    // Both sides stay in step: the next matching bucket reduces normally.
    return reduce_and_check(pair, p, DType::kF64, {9}, ReduceOp::kSum);
  });
  CHECK(zero);
  CHECK(one);
}

TEST_CASE("SharedPair waits asleep: a process waiting 100 ms for the other uses little CPU") {
  const auto [zero, one] = on_two_processes([](SharedPair& pair, int p) {
    if (p == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return reduce_and_check(pair, p, DType::kF32, {64}, ReduceOp::kSum);
    }
    const double cpu = thread_cpu_ms();
    const bool ok = reduce_and_check(pair, p, DType::kF32, {64}, ReduceOp::kSum);
    // A spinning wait would burn about 100 ms of CPU here.
    return ok && thread_cpu_ms() - cpu < 40;
  });
  CHECK(zero);
  CHECK(one);
}
