#include "runtime/buffer_pool.h"

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/error.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define DTENSOR_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define DTENSOR_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define DTENSOR_POISON(p, n) ((void)(p), (void)(n))
#define DTENSOR_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace dtensor {

namespace {

constexpr size_t kSmallLimit = 4096;  // up to here, classes are multiples of kSmallStep
constexpr size_t kSmallStep = 64;

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }

size_t cap_from_env() {
  const char* text = std::getenv("DTENSOR_BUFFER_POOL_BYTES");
  if (text == nullptr) return BufferPool::kDefaultMaxCachedBytes;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (*text < '0' || *text > '9' || *end != '\0' || errno != 0) {
    throw_error<InvalidArgumentError>(
        "BufferPool::global",
        "DTENSOR_BUFFER_POOL_BYTES must be a non-negative integer number of bytes, got '{}'", text);
  }
  return static_cast<size_t>(value);
}

// Frees a buffer that is not in the cache. Cached buffers are poisoned under ASan.
void destroy(Storage* storage) {
  DTENSOR_UNPOISON(storage->data(), storage->nbytes());
  delete storage;
}

}  // namespace

// The cache proper. It is shared with every outstanding Storage's deleter, so it lives until
// the pool and all of its buffers are gone.
struct BufferPool::Cache {
  explicit Cache(size_t max_bytes) : max_cached_bytes(max_bytes) {}
  ~Cache() { free_all(); }

  // Takes a buffer of exactly `capacity` bytes from the cache, or nullptr.
  Storage* take(size_t capacity) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = free_lists.find(capacity);
    if (it == free_lists.end() || it->second.empty()) {
      ++misses;
      return nullptr;
    }
    Storage* storage = it->second.back();
    it->second.pop_back();
    cached_bytes -= capacity;
    --cached_buffers;
    ++hits;
    DTENSOR_UNPOISON(storage->data(), capacity);
    return storage;
  }

  // Puts a released buffer back, or frees it when the cache is closed or full.
  void give_back(Storage* storage) noexcept {
    const size_t capacity = storage->nbytes();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!closed && cached_bytes + capacity <= max_cached_bytes) {
        try {
          free_lists[capacity].push_back(storage);
          cached_bytes += capacity;
          ++cached_buffers;
          DTENSOR_POISON(storage->data(), capacity);
          return;
        } catch (const std::bad_alloc&) {
          // No room to remember it: free it below.
        }
      }
    }
    destroy(storage);
  }

  void free_all() {
    std::unordered_map<size_t, std::vector<Storage*>> lists;
    {
      std::lock_guard<std::mutex> lock(mu);
      lists.swap(free_lists);
      cached_bytes = 0;
      cached_buffers = 0;
    }
    for (auto& entry : lists) {
      for (Storage* storage : entry.second) destroy(storage);
    }
  }

  mutable std::mutex mu;
  const size_t max_cached_bytes;
  std::unordered_map<size_t, std::vector<Storage*>> free_lists;  // by capacity; guarded by mu
  size_t cached_bytes = 0;                                       // guarded by mu
  size_t cached_buffers = 0;                                     // guarded by mu
  uint64_t hits = 0;                                             // guarded by mu
  uint64_t misses = 0;                                           // guarded by mu
  bool closed = false;  // the BufferPool is gone: free on release; guarded by mu
};

struct BufferPool::Recycler {
  void operator()(Storage* storage) const noexcept { cache->give_back(storage); }
  std::shared_ptr<Cache> cache;
};

BufferPool::BufferPool(size_t max_cached_bytes)
    : cache_(std::make_shared<Cache>(max_cached_bytes)) {}

BufferPool::~BufferPool() {
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    cache_->closed = true;
  }
  cache_->free_all();
}

BufferPool& BufferPool::global() {
  // Never destroyed: tensors in static objects may release their storage during exit.
  static BufferPool* pool = new BufferPool(cap_from_env());
  return *pool;
}

size_t BufferPool::size_class(size_t nbytes) {
  if (nbytes <= kSmallLimit) return nbytes == 0 ? kSmallStep : round_up(nbytes, kSmallStep);
  // Requests this large cannot be allocated anyway; keep them exact rather than overflow.
  if (nbytes > (size_t{1} << 62)) return nbytes;
  // 2^k < nbytes <= 2^(k+1): four classes of 2^(k-2) bytes each in that octave.
  const int k = 63 - __builtin_clzll(static_cast<unsigned long long>(nbytes - 1));
  return round_up(nbytes, size_t{1} << (k - 2));
}

std::shared_ptr<Storage> BufferPool::acquire(size_t nbytes) {
  const size_t capacity = size_class(nbytes);
  Storage* storage = cache_->take(capacity);
  if (storage == nullptr) {
    try {
      storage = new Storage(capacity);
    } catch (const std::bad_alloc&) {
      trim();
      storage = new Storage(capacity);
    }
  }
  // If the control block cannot be allocated, shared_ptr runs the deleter, so nothing leaks.
  return std::shared_ptr<Storage>(storage, Recycler{cache_});
}

void BufferPool::trim() { cache_->free_all(); }

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  Stats s;
  s.hits = cache_->hits;
  s.misses = cache_->misses;
  s.cached_bytes = cache_->cached_bytes;
  s.cached_buffers = cache_->cached_buffers;
  return s;
}

size_t BufferPool::max_cached_bytes() const { return cache_->max_cached_bytes; }

}  // namespace dtensor
