#include "runtime/process.h"

#include <atomic>

#include "runtime/error.h"

namespace dtensor {
namespace {
std::atomic<int64_t> process_index{0};
std::atomic<int64_t> process_count{1};
}  // namespace

ProcessInfo this_process() { return {process_index.load(), process_count.load()}; }

void set_this_process(ProcessInfo info) {
  if (info.count < 1 || info.index < 0 || info.index >= info.count) {
    throw_error<InvalidArgumentError>("set_this_process", "process {} of {} is not a valid place",
                                      info.index, info.count);
  }
  process_count.store(info.count);
  process_index.store(info.index);
}

}  // namespace dtensor
