#include "runtime/buffer_pool.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using namespace dtensor;

namespace {

bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

}  // namespace

TEST_CASE("size classes: multiples of 64 up to 4 KiB, then four per power of two") {
  CHECK(BufferPool::size_class(0) == 64);
  CHECK(BufferPool::size_class(1) == 64);
  CHECK(BufferPool::size_class(64) == 64);
  CHECK(BufferPool::size_class(65) == 128);
  CHECK(BufferPool::size_class(4000) == 4032);
  CHECK(BufferPool::size_class(4096) == 4096);
  CHECK(BufferPool::size_class(4097) == 5120);
  CHECK(BufferPool::size_class(6000) == 6144);
  CHECK(BufferPool::size_class(8192) == 8192);
  CHECK(BufferPool::size_class(8193) == 10240);
  CHECK(BufferPool::size_class(size_t{3} << 20) == size_t{3} << 20);
  CHECK(BufferPool::size_class((size_t{1} << 30) + 1) == (size_t{5} << 28));
  for (size_t n = 0; n < (size_t{1} << 22); n = n * 3 / 2 + 1) {
    INFO("n " << n);
    size_t c = BufferPool::size_class(n);
    CHECK(c >= n);
    CHECK(c % 64 == 0);
    if (n > 4096) CHECK(c <= n + n / 4);
  }
}

TEST_CASE("a released buffer is reused by the next acquire of its class") {
  BufferPool pool;
  void* first = nullptr;
  {
    std::shared_ptr<Storage> s = pool.acquire(1000);
    CHECK(s->nbytes() == 1024);
    first = s->data();
    CHECK(pool.stats().misses == 1);
    CHECK(pool.stats().cached_bytes == 0);
  }
  CHECK(pool.stats().cached_bytes == 1024);
  CHECK(pool.stats().cached_buffers == 1);

  std::shared_ptr<Storage> again = pool.acquire(1001);  // same class
  CHECK(again->data() == first);
  BufferPool::Stats stats = pool.stats();
  CHECK(stats.hits == 1);
  CHECK(stats.misses == 1);
  CHECK(stats.cached_bytes == 0);

  std::shared_ptr<Storage> other = pool.acquire(5000);  // another class: a fresh allocation
  CHECK(other->data() != first);
  CHECK(pool.stats().misses == 2);
}

TEST_CASE("pooled buffers are 64-byte aligned and writable to their capacity") {
  BufferPool pool;
  std::vector<std::shared_ptr<Storage>> held;
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{100}, size_t{4097}, size_t{70000}}) {
    std::shared_ptr<Storage> s = pool.acquire(n);
    CHECK(aligned64(s->data()));
    CHECK(s->nbytes() >= n);
    std::memset(s->data(), 0xab, s->nbytes());
    held.push_back(s);
  }
  held.clear();
  for (size_t n : {size_t{1}, size_t{4097}}) {
    std::shared_ptr<Storage> s = pool.acquire(n);
    CHECK(aligned64(s->data()));
  }
  CHECK(pool.stats().hits == 2);
}

TEST_CASE("the cache never holds more than its cap") {
  BufferPool pool(10000);
  CHECK(pool.max_cached_bytes() == 10000);
  {
    std::shared_ptr<Storage> a = pool.acquire(4096);
    std::shared_ptr<Storage> b = pool.acquire(4096);
    std::shared_ptr<Storage> c = pool.acquire(4096);
    std::shared_ptr<Storage> big = pool.acquire(20000);  // larger than the whole cap
  }
  BufferPool::Stats stats = pool.stats();
  CHECK(stats.cached_bytes == 8192);
  CHECK(stats.cached_buffers == 2);

  BufferPool off(0);
  { std::shared_ptr<Storage> s = off.acquire(64); }
  CHECK(off.stats().cached_bytes == 0);
  { std::shared_ptr<Storage> s = off.acquire(64); }
  CHECK(off.stats().hits == 0);
  CHECK(off.stats().misses == 2);
}

TEST_CASE("trim frees every cached buffer") {
  BufferPool pool;
  {
    std::vector<std::shared_ptr<Storage>> held;
    for (size_t n = 64; n < 100000; n *= 2) held.push_back(pool.acquire(n));
  }
  CHECK(pool.stats().cached_buffers > 5);
  pool.trim();
  CHECK(pool.stats().cached_bytes == 0);
  CHECK(pool.stats().cached_buffers == 0);
  std::shared_ptr<Storage> s = pool.acquire(64);
  CHECK(pool.stats().hits == 0);
}

TEST_CASE("storage may outlive its pool") {
  std::shared_ptr<Storage> survivor;
  {
    BufferPool pool;
    survivor = pool.acquire(256);
    { std::shared_ptr<Storage> cached = pool.acquire(128); }
  }
  std::memset(survivor->data(), 1, survivor->nbytes());
  survivor.reset();  // freed, not cached: the pool is gone
}

TEST_CASE("concurrent acquire and release from four threads") {
  BufferPool pool(1 << 20);
  constexpr int kThreads = 4, kRounds = 2000;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<Storage>> held;
      for (int r = 0; r < kRounds; ++r) {
        size_t n = static_cast<size_t>(64 * (1 + (r * 7 + t) % 40));
        std::shared_ptr<Storage> s = pool.acquire(n);
        if (!aligned64(s->data()) || s->nbytes() < n) bad.fetch_add(1);
        // Write a thread-specific pattern and check it survives until release.
        std::memset(s->data(), t + 1, n);
        held.push_back(std::move(s));
        if (held.size() > 8) {
          const auto* bytes = static_cast<const unsigned char*>(held.front()->data());
          if (bytes[0] != t + 1) bad.fetch_add(1);
          held.erase(held.begin());
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(bad.load() == 0);
  BufferPool::Stats stats = pool.stats();
  CHECK(stats.hits + stats.misses == kThreads * kRounds);
  CHECK(stats.hits > 0);
  CHECK(stats.cached_bytes <= pool.max_cached_bytes());
}

TEST_CASE("Tensor::empty takes its storage from the global pool") {
  BufferPool& pool = BufferPool::global();
  CHECK(&pool == &BufferPool::global());
  if (const char* env = std::getenv("DTENSOR_BUFFER_POOL_BYTES")) {
    CHECK(pool.max_cached_bytes() == std::strtoull(env, nullptr, 10));
  } else {
    CHECK(pool.max_cached_bytes() == BufferPool::kDefaultMaxCachedBytes);
  }
  pool.trim();
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000}, DType::kF32);
    first = t.raw_data();
  }
  BufferPool::Stats before = pool.stats();
  Tensor t = Tensor::empty({999}, DType::kF32);  // same size class
  if (pool.max_cached_bytes() >= 4096) {
    CHECK(t.raw_data() == first);
    CHECK(pool.stats().hits == before.hits + 1);
  }
  Tensor z = Tensor::zeros({1000}, DType::kF32);
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(z.data<float>()[i] == 0.0f);
  CHECK(t.nbytes() == 999 * 4);
}
