#include "runtime/emulated/opaque_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>

#include "runtime/error.h"

namespace dtensor::emulated {
namespace {

struct Region {
  size_t length = 0;  // mapped bytes, whole pages
  int open = 0;       // windows holding it open
};

struct Table {
  std::mutex mu;
  std::map<uintptr_t, Region> regions;  // by start address
};

Table& table() {
  static auto* t = new Table;  // never destroyed: storage may be freed during exit
  return *t;
}

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// The region holding `p`, or end(). Caller holds the mutex.
std::map<uintptr_t, Region>::iterator find(Table& t, const void* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  auto it = t.regions.upper_bound(at);
  if (it == t.regions.begin()) return t.regions.end();
  --it;
  return at < it->first + it->second.length ? it : t.regions.end();
}

void protect(uintptr_t start, size_t length, int prot) {
  if (::mprotect(reinterpret_cast<void*>(start), length, prot) != 0) {
    throw_error<InternalError>("emulated GPU", "mprotect of {} bytes failed", length);
  }
}

}  // namespace

void* allocate_opaque(size_t nbytes) {
  const size_t page = page_size();
  const size_t length = std::max(page, (nbytes + page - 1) / page * page);
  void* data = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.regions[reinterpret_cast<uintptr_t>(data)] = Region{length, 0};
  return data;
}

void free_opaque(void* data) noexcept {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.regions.find(reinterpret_cast<uintptr_t>(data));
  if (it == t.regions.end()) return;
  ::munmap(data, it->second.length);
  t.regions.erase(it);
}

bool is_opaque(const void* data) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return find(t, data) != t.regions.end();
}

bool is_open(const void* data) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = find(t, data);
  return it != t.regions.end() && it->second.open > 0;
}

OpenWindow::OpenWindow(std::vector<const void*> pointers) {
  for (const void* p : pointers) add(p);
}

void OpenWindow::add(const void* pointer) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = find(t, pointer);
  if (it == t.regions.end()) return;
  const void* start = reinterpret_cast<const void*>(it->first);
  // Once per allocation per window: two shards viewing one buffer open it once.
  if (std::find(opened_.begin(), opened_.end(), start) != opened_.end()) return;
  if (it->second.open++ == 0) protect(it->first, it->second.length, PROT_READ | PROT_WRITE);
  opened_.push_back(start);
}

OpenWindow::~OpenWindow() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (const void* start : opened_) {
    auto it = t.regions.find(reinterpret_cast<uintptr_t>(start));
    if (it == t.regions.end()) continue;  // freed while open: nothing left to protect
    if (--it->second.open == 0) {
      ::mprotect(const_cast<void*>(start), it->second.length, PROT_NONE);
    }
  }
}

}  // namespace dtensor::emulated
