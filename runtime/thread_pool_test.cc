#include "runtime/thread_pool.h"

#include <time.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/error.h"

using namespace dtensor;

namespace {

// Counts how many times each index ran.
class IndexCounter {
 public:
  explicit IndexCounter(int64_t n) : counts_(static_cast<size_t>(n)) {}
  void hit(int64_t i) { counts_[static_cast<size_t>(i)].fetch_add(1); }
  bool each_exactly_once() const {
    for (const auto& c : counts_) {
      if (c.load() != 1) return false;
    }
    return true;
  }

 private:
  std::vector<std::atomic<int>> counts_;
};

}  // namespace

TEST_CASE("parallel_for runs every index exactly once") {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    CHECK(pool.num_threads() == threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      INFO("threads " << threads << ", n " << n);
      IndexCounter counter(n);
      pool.parallel_for(n, [&](int64_t i) { counter.hit(i); });
      CHECK(counter.each_exactly_once());
    }
  }
}

TEST_CASE("parallel_for balances uneven tasks and reuses the pool many times") {
  ThreadPool pool(4);
  for (int round = 0; round < 200; ++round) {
    IndexCounter counter(33);
    pool.parallel_for(33, [&](int64_t i) {
      if (i % 11 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      counter.hit(i);
    });
    REQUIRE(counter.each_exactly_once());
  }
}

TEST_CASE("the caller and a worker run tasks at the same time") {
  ThreadPool pool(2);
  std::atomic<int> arrived{0};
  std::atomic<bool> both_seen{true};
  pool.parallel_for(2, [&](int64_t) {
    arrived.fetch_add(1);
    // Each task waits for the other: only passes if two threads run them concurrently.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (arrived.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        both_seen = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  CHECK(both_seen.load());
}

TEST_CASE("exceptions propagate with their message and the pool stays usable") {
  for (int threads : {1, 2, 4}) {
    INFO("threads " << threads);
    ThreadPool pool(threads);
    std::atomic<int> ran{0};
    CHECK_THROWS_MATCHES(pool.parallel_for(100,
                                           [&](int64_t i) {
                                             ran.fetch_add(1);
                                             if (i == 17)
                                               throw std::runtime_error("task 17 failed");
                                           }),
                         std::runtime_error, Catch::Message("task 17 failed"));
    CHECK(ran.load() >= 1);
    CHECK(ran.load() <= 100);

    // Every task throws: exactly one exception comes out.
    CHECK_THROWS_AS(pool.parallel_for(50, [](int64_t) { throw InvalidArgumentError("t", "x"); }),
                    InvalidArgumentError);

    IndexCounter counter(500);
    pool.parallel_for(500, [&](int64_t i) { counter.hit(i); });
    CHECK(counter.each_exactly_once());
  }
}

TEST_CASE("nested parallel_for runs inline without deadlock") {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 16, kInner = 32;
  IndexCounter counter(kOuter * kInner);
  std::atomic<bool> inner_inline{true};
  pool.parallel_for(kOuter, [&](int64_t o) {
    const std::thread::id outer_thread = std::this_thread::get_id();
    pool.parallel_for(kInner, [&](int64_t i) {
      if (std::this_thread::get_id() != outer_thread) inner_inline = false;
      counter.hit(o * kInner + i);
    });
  });
  CHECK(counter.each_exactly_once());
  CHECK(inner_inline.load());
}

TEST_CASE("pools nested in each other's tasks do not deadlock") {
  ThreadPool a(3), b(3);
  IndexCounter counter(8 * 8 * 8);
  a.parallel_for(8, [&](int64_t i) {
    b.parallel_for(8, [&](int64_t j) {
      a.parallel_for(8, [&](int64_t k) { counter.hit((i * 8 + j) * 8 + k); });
    });
  });
  CHECK(counter.each_exactly_once());
}

TEST_CASE("concurrent callers from several threads") {
  ThreadPool pool(3);
  constexpr int kCallers = 4, kRounds = 50;
  constexpr int64_t kN = 257;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        IndexCounter counter(kN);
        pool.parallel_for(kN, [&](int64_t i) { counter.hit(i); });
        if (!counter.each_exactly_once()) failures.fetch_add(1);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("callers and workers that sleep between calls lose no wake-up") {
  // A zero spin window makes every idle worker and every waiting caller sleep at once, so each
  // call goes through the condition variables; a lost wake-up would still finish (the caller runs
  // its loop alone) but the check below that workers took part would fail.
  for (int64_t spin_us : {0, 50}) {
    INFO("idle_spin " << spin_us << " us");
    ThreadPool pool(3, std::chrono::microseconds(spin_us));
    constexpr int kCallers = 6, kRounds = 300;
    std::atomic<int> failures{0};
    std::atomic<int> on_workers{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c) {
      callers.emplace_back([&, c] {
        for (int r = 0; r < kRounds; ++r) {
          const int64_t n = 1 + (r + c) % 9;
          IndexCounter counter(n);
          const std::thread::id caller = std::this_thread::get_id();
          pool.parallel_for(n, [&](int64_t i) {
            if (std::this_thread::get_id() != caller) on_workers.fetch_add(1);
            if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
            counter.hit(i);
          });
          if (!counter.each_exactly_once()) failures.fetch_add(1);
          if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
    }
    for (std::thread& t : callers) t.join();
    CHECK(failures.load() == 0);
    CHECK(on_workers.load() > 0);
  }
}

TEST_CASE("an exception in a sleeping pool's task reaches the caller") {
  ThreadPool pool(2, std::chrono::microseconds(0));
  for (int round = 0; round < 50; ++round) {
    CHECK_THROWS_MATCHES(
        pool.parallel_for(2,
                          [](int64_t i) {
                            std::this_thread::sleep_for(std::chrono::microseconds(100));
                            if (i == 1) throw std::runtime_error("index 1");
                          }),
        std::runtime_error, Catch::Message("index 1"));
  }
}

namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

TEST_CASE("an idle pool's workers stop spinning and sleep") {
  // Workers spin for at most idle_spin after their last job: over an idle second the whole
  // process then burns about 3 x 2 ms of CPU, where workers that never slept would burn 3 s.
  ThreadPool pool(4, std::chrono::microseconds(2000));
  for (int i = 0; i < 200; ++i) pool.parallel_for(4, [](int64_t) {});
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double burnt = process_cpu_seconds() - before;
  INFO("CPU seconds over an idle second: " << burnt);
  CHECK(burnt < 0.3);
  // And they still wake up for the next job.
  IndexCounter counter(64);
  pool.parallel_for(64, [&](int64_t i) { counter.hit(i); });
  CHECK(counter.each_exactly_once());
}

TEST_CASE("in_worker is true only inside tasks") {
  ThreadPool pool(3);
  CHECK_FALSE(ThreadPool::in_worker());
  std::atomic<int> inside{0};
  pool.parallel_for(20, [&](int64_t) {
    if (ThreadPool::in_worker()) inside.fetch_add(1);
  });
  CHECK(inside.load() == 20);
  pool.parallel_for(1, [&](int64_t) { CHECK(ThreadPool::in_worker()); });
  CHECK_FALSE(ThreadPool::in_worker());
}

TEST_CASE("invalid pool sizes are rejected") {
  CHECK_THROWS_MATCHES(ThreadPool(0), InvalidArgumentError,
                       Catch::Message("[ThreadPool] num_threads must be >= 1, got 0"));
  CHECK_THROWS_MATCHES(ThreadPool(-3), InvalidArgumentError,
                       Catch::Message("[ThreadPool] num_threads must be >= 1, got -3"));
  CHECK_THROWS_MATCHES(ThreadPool(2, std::chrono::microseconds(-1)), InvalidArgumentError,
                       Catch::Message("[ThreadPool] idle_spin must be >= 0 us, got -1 us"));
}

TEST_CASE("the global pool is sized from the machine or DTENSOR_NUM_THREADS") {
  ThreadPool& pool = ThreadPool::global();
  CHECK(&pool == &ThreadPool::global());
  if (const char* env = std::getenv("DTENSOR_NUM_THREADS")) {
    CHECK(pool.num_threads() == std::atoi(env));
  } else {
    CHECK(pool.num_threads() >= 1);
  }
  if (const char* env = std::getenv("DTENSOR_POOL_SPIN_US")) {
    CHECK(pool.idle_spin().count() == std::atoi(env));
  } else if (std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") == nullptr) {
    CHECK(pool.idle_spin() == ThreadPool::kDefaultIdleSpin);
  }
  IndexCounter counter(100);
  pool.parallel_for(100, [&](int64_t i) { counter.hit(i); });
  CHECK(counter.each_exactly_once());
}
