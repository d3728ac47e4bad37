// BufferPool: a cache of 64-byte aligned host allocations, so that hot paths reuse buffers
// instead of calling malloc and faulting in fresh pages.
//
// `acquire(nbytes)` hands out a Storage whose nbytes() is the request rounded up to a size class:
// multiples of 64 bytes up to 4 KiB, then four classes per power of two (so at most 25% slack).
// When the last shared_ptr to it drops, the buffer goes back to the pool's cache instead of being
// freed, unless the cache would then hold more than `max_cached_bytes`; in that case (or once the
// pool is gone) it is freed. Recycled buffers are uninitialised: they hold old contents.
//
// Ownership: holders of the shared_ptr own the buffer; the pool owns only cached buffers. Storage
// handed out keeps the pool's cache alive, so it may be released after the BufferPool is
// destroyed. `global()` is never destroyed.
//
// Thread-safety: every method may be called from any thread; one mutex guards the cache, and
// storage may be released on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/tensor.h"

namespace dtensor {

class BufferPool {
 public:
  struct Stats {
    uint64_t hits = 0;        // acquires served from the cache
    uint64_t misses = 0;      // acquires that allocated
    size_t cached_bytes = 0;  // bytes held in the cache now
    size_t cached_buffers = 0;
  };

  static constexpr size_t kDefaultMaxCachedBytes = size_t{1} << 30;

  explicit BufferPool(size_t max_cached_bytes = kDefaultMaxCachedBytes);
  // Frees the cached buffers; storage still held elsewhere is freed when released.
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool, used by Tensor::empty. Its cap is kDefaultMaxCachedBytes unless the
  // environment variable DTENSOR_BUFFER_POOL_BYTES gives another (0 turns caching off); a value
  // that is not a non-negative integer throws InvalidArgumentError.
  static BufferPool& global();

  // A 64-byte aligned buffer of size_class(nbytes) bytes, from the cache when one is free.
  // Throws std::bad_alloc if memory runs out even after trimming the cache.
  std::shared_ptr<Storage> acquire(size_t nbytes);

  // Frees every cached buffer.
  void trim();

  Stats stats() const;
  size_t max_cached_bytes() const;

  // The capacity acquire(nbytes) hands out.
  static size_t size_class(size_t nbytes);

 private:
  struct Cache;
  struct Recycler;

  std::shared_ptr<Cache> cache_;
};

}  // namespace dtensor
