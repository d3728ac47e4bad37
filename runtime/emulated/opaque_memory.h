// Opaque memory: the emulated GPU's memory, host pages the host cannot touch.
//
// allocate_opaque hands out whole pages (mmap) protected PROT_NONE, so that any host code that
// reads or writes them segfaults, as a dereference of a CUDA device pointer on the host would fail.
// Only the emulated GPU's own kernels and copies open them: an OpenWindow makes the allocations
// holding the given pointers readable and writable for its lifetime. Windows are counted per
// allocation, so nested and concurrent windows over the same buffer close it only when the last
// one ends.
//
// The remaining hole (documented in docs/gpus.md): protection is per page and per process, not per
// thread, so while one thread runs a kernel on a buffer, host code on another thread can read
// that buffer without faulting. Tests that hunt for host reads therefore catch them reliably only
// when no emulated kernel runs concurrently on the same buffer.
//
// Thread-safety: every function may be called from any thread (one mutex over the allocation
// table; mprotect calls happen under it).
#pragma once

#include <cstddef>
#include <vector>

namespace dtensor::emulated {

// At least `nbytes` bytes (one page for 0), page-aligned, PROT_NONE. Throws std::bad_alloc.
void* allocate_opaque(size_t nbytes);
// Gives back what allocate_opaque returned; `data` must not be open.
void free_opaque(void* data) noexcept;

// True if `data` points into an allocation of allocate_opaque.
bool is_opaque(const void* data);
// True if `data` points into an opaque allocation that some window currently holds open.
bool is_open(const void* data);

// Opens the opaque allocations holding the given pointers (pointers elsewhere, such as host
// memory, are ignored) until destroyed.
class OpenWindow {
 public:
  OpenWindow() = default;
  explicit OpenWindow(std::vector<const void*> pointers);
  ~OpenWindow();
  OpenWindow(const OpenWindow&) = delete;
  OpenWindow& operator=(const OpenWindow&) = delete;

  // Opens one more allocation (no-op for non-opaque pointers).
  void add(const void* pointer);

 private:
  std::vector<const void*> opened_;  // one entry per allocation this window opened
};

}  // namespace dtensor::emulated
