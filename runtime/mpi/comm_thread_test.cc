#include "runtime/mpi/comm_thread.h"

// Its own main: //tests:catch_main is not visible from this package.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace dtensor;

TEST_CASE("CommThread runs work in submission order and tickets tell when it ran") {
  CommThread thread;
  std::vector<int> order;
  std::atomic<bool> release{false};
  const uint64_t first = thread.submit([&] {
    while (!release.load()) std::this_thread::yield();
    order.push_back(1);
  });
  const uint64_t second = thread.submit([&] { order.push_back(2); });
  CHECK(second == first + 1);
  CHECK_FALSE(thread.done(first));
  CHECK_FALSE(thread.done(second));
  release.store(true);
  thread.wait(second);
  CHECK(thread.done(first));
  CHECK(order == std::vector<int>{1, 2});
}

TEST_CASE("CommThread::drain waits for everything submitted") {
  CommThread thread;
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    thread.submit([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ran.fetch_add(1);
    });
  }
  thread.drain();
  CHECK(ran.load() == 50);
}

TEST_CASE("CommThread::stop runs what is queued and a later submit starts it again") {
  CommThread thread;
  std::atomic<int> ran{0};
  for (int i = 0; i < 5; ++i) thread.submit([&] { ran.fetch_add(1); });
  thread.stop();
  CHECK(ran.load() == 5);
  const uint64_t next = thread.submit([&] { ran.fetch_add(1); });
  thread.wait(next);
  CHECK(ran.load() == 6);
}

TEST_CASE("CommThread with nothing submitted stops and drains at once") {
  CommThread thread;
  thread.drain();
  thread.stop();
  CHECK(thread.done(0));
}
