#include "runtime/mpi/shared_reducer.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "runtime/cpu_relax.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/mpi/fold.h"
#include "runtime/shape.h"

namespace dtensor {

// The start of every segment, shared between processes.
struct SharedReducer::Header {
  std::atomic<uint32_t> step;      // the last step this segment's process published
  std::atomic<uint32_t> sleepers;  // set by a process before it sleeps on `step`
  char padding[56];
  uint64_t check;  // the description of the piece this process is reducing
  char padding2[56];
  char exchanged[2][kExchangeBytes];  // exchange()'s messages, by the parity of their step
};

namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "a futex word must be a plain 32-bit word");

// Shared between processes, so no FUTEX_PRIVATE_FLAG.
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen) {
  const timespec limit{0, 2'000'000};  // wake now and then whatever happens: never stuck asleep
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &limit, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Step counters wrap: `seen` has reached `target` when it is at most 2^31 steps past it.
bool reached(uint32_t seen, uint32_t target) { return static_cast<int32_t>(seen - target) >= 0; }

// How long a wait spins before it sleeps: long enough for a process running on another core to
// arrive, short enough that a wait for a busy process gives the core away.
constexpr int kSpins = 4000;

constexpr size_t kRunAlignment = 64;

size_t align_up(size_t n) { return (n + kRunAlignment - 1) / kRunAlignment * kRunAlignment; }

int64_t total_elements(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.num_elements();
  return n;
}

// out[i] = v[0][i] op v[1][i] op ... in process order; then copied to `back`.
template <typename T>
void fold_span(const std::vector<const T*>& v, T* __restrict out, T* back, size_t n, ReduceOp op) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    for (size_t i = 0; i < n; ++i) {  // in f32, rounded once
      float acc = static_cast<float>(v[0][i]);
      for (size_t p = 1; p < v.size(); ++p) acc = combine(acc, static_cast<float>(v[p][i]), op);
      out[i] = BFloat16(acc);
    }
  } else {
    const T* __restrict first = v[0];
    const T* __restrict second = v[1];
    if (op == ReduceOp::kSum) {
      for (size_t i = 0; i < n; ++i) out[i] = combine(first[i], second[i], ReduceOp::kSum);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = combine(first[i], second[i], op);
    }
    for (size_t p = 2; p < v.size(); ++p) {
      const T* __restrict next = v[p];
      for (size_t i = 0; i < n; ++i) out[i] = combine(out[i], next[i], op);
    }
  }
  std::memcpy(back, out, n * sizeof(T));
}

}  // namespace

struct SharedReducer::Run {
  size_t tensor;  // index into the bucket
  size_t first;   // first element
  size_t count;   // elements
  size_t offset;  // bytes into the area
};

size_t SharedReducer::area_bytes(int processes) {
  const size_t share = (size_t{8} << 20) / static_cast<size_t>(std::max(processes, 1));
  return std::max(size_t{64} << 10, share / kRunAlignment * kRunAlignment);
}

SharedReducer::SharedReducer(const std::vector<void*>& segments, int self)
    : self_(self), area_bytes_(area_bytes(static_cast<int>(segments.size()))) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  DTENSOR_CHECK(segments.size() >= 2 && self >= 0 && self < static_cast<int>(segments.size()));
  for (void* s : segments) segments_.push_back(static_cast<char*>(s));
}

char* SharedReducer::area(int process, uint64_t piece) const {
  return segments_[static_cast<size_t>(process)] + kHeaderBytes + (piece % 2) * area_bytes_;
}

void SharedReducer::arrive_and_wait(const std::function<void(int process)>* waiting_for) {
  const uint32_t step = ++step_;
  Header& mine = *reinterpret_cast<Header*>(segments_[static_cast<size_t>(self_)]);
  // Sequentially consistent with the sleepers' flag below: either a sleeper sees the new step
  // before it sleeps, or this sees its flag and wakes it. (A lost race costs one futex timeout.)
  mine.step.store(step, std::memory_order_seq_cst);
  if (mine.sleepers.load(std::memory_order_seq_cst) != 0) {
    mine.sleepers.store(0, std::memory_order_seq_cst);
    futex_wake(&mine.step);
  }
  for (size_t p = 0; p < segments_.size(); ++p) {
    if (static_cast<int>(p) == self_) continue;
    Header& other = *reinterpret_cast<Header*>(segments_[p]);
    bool arrived = false;
    for (int i = 0; i < kSpins && !arrived; ++i) {
      arrived = reached(other.step.load(std::memory_order_acquire), step);
      if (!arrived) cpu_relax();
    }
    while (!arrived) {
      other.sleepers.store(1, std::memory_order_seq_cst);
      const uint32_t seen = other.step.load(std::memory_order_seq_cst);
      arrived = reached(seen, step);
      if (!arrived) {
        futex_wait(&other.step, seen);
        if (waiting_for != nullptr) (*waiting_for)(static_cast<int>(p));
      }
    }
  }
}

void SharedReducer::all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                               ReduceOp op, const char* function) {
  // The whole bucket's description goes into every piece's check, so different buckets differ at
  // their first piece (rather than one process waiting for a piece the others never send).
  bucket_check_ = static_cast<uint64_t>(op) * 0x9e3779b97f4a7c15ull + inputs.size();
  for (const Tensor& in : inputs) {
    bucket_check_ = bucket_check_ * 1099511628211ull +
                    static_cast<uint64_t>(in.num_elements()) * 8 +
                    static_cast<uint64_t>(in.dtype());
  }
  const uint64_t pieces_before = pieces_;
  // Cut the bucket into pieces of at most one area, runs aligned inside it.
  std::vector<Run> runs;
  size_t used = 0;
  for (size_t t = 0; t < inputs.size(); ++t) {
    const size_t esize = dtype_size(inputs[t].dtype());
    const size_t total = static_cast<size_t>(inputs[t].num_elements());
    for (size_t first = 0; first < total;) {
      const size_t at = align_up(used);
      const size_t room = at < area_bytes_ ? (area_bytes_ - at) / esize : 0;
      if (room == 0) {
        reduce_piece(runs, inputs, outputs, op, function);
        runs.clear();
        used = 0;
        continue;
      }
      const size_t count = std::min(room, total - first);
      runs.push_back({t, first, count, at});
      used = at + count * esize;
      first += count;
    }
  }
  // A bucket of empty tensors still meets the others once, so all check they agree.
  if (!runs.empty() || pieces_ == pieces_before) reduce_piece(runs, inputs, outputs, op, function);
}

void SharedReducer::exchange(const void* mine, size_t bytes, void* all,
                             const std::function<void(int process)>& waiting_for) {
  DTENSOR_CHECK(bytes <= kExchangeBytes);
  // A slot is rewritten two steps later, once every process has passed the step in between, so
  // after it has read the slot.
  const size_t slot = (step_ + 1) % 2;
  std::memcpy(reinterpret_cast<Header*>(segments_[static_cast<size_t>(self_)])->exchanged[slot],
              mine, bytes);
  arrive_and_wait(&waiting_for);
  for (size_t p = 0; p < segments_.size(); ++p) {
    std::memcpy(static_cast<char*>(all) + p * bytes,
                reinterpret_cast<const Header*>(segments_[p])->exchanged[slot], bytes);
  }
}

void SharedReducer::reduce_piece(const std::vector<Run>& runs, const std::vector<Tensor>& inputs,
                                 std::vector<Tensor>& outputs, ReduceOp op, const char* function) {
  const int processes = static_cast<int>(segments_.size());
  char* mine = area(self_, pieces_);
  std::vector<const char*> areas;
  for (int p = 0; p < processes; ++p) areas.push_back(area(p, pieces_));
  ++pieces_;
  const uint64_t check = bucket_check_ + pieces_;
  for (const Run& r : runs) {
    const size_t esize = dtype_size(inputs[r.tensor].dtype());
    std::memcpy(mine + r.offset,
                static_cast<const char*>(inputs[r.tensor].raw_data()) + r.first * esize,
                r.count * esize);
  }
  reinterpret_cast<Header*>(segments_[static_cast<size_t>(self_)])->check = check;
  arrive_and_wait();
  for (int p = 0; p < processes; ++p) {
    if (reinterpret_cast<const Header*>(segments_[static_cast<size_t>(p)])->check != check) {
      throw_error<CommunicationError>(
          function,
          "the processes reduce different tensors (this process: {} tensors, {} elements); every "
          "process must make the same collective calls, with the same shapes, dtypes and op, in "
          "the same order",
          inputs.size(), total_elements(inputs));
    }
  }
  for (const Run& r : runs) {
    const ShardRange own = chunk_range(static_cast<int64_t>(r.count), processes, self_);
    visit_dtype(inputs[r.tensor].dtype(), [&](auto tag) {
      using T = decltype(tag);
      const size_t at = r.offset + static_cast<size_t>(own.offset) * sizeof(T);
      std::vector<const T*> values;
      for (const char* a : areas) values.push_back(reinterpret_cast<const T*>(a + at));
      fold_span(values, static_cast<T*>(outputs[r.tensor].raw_data()) + r.first + own.offset,
                reinterpret_cast<T*>(mine + at), static_cast<size_t>(own.size), op);
    });
  }
  arrive_and_wait();
  for (const Run& r : runs) {
    const size_t esize = dtype_size(inputs[r.tensor].dtype());
    for (int p = 0; p < processes; ++p) {
      if (p == self_) continue;
      const ShardRange chunk = chunk_range(static_cast<int64_t>(r.count), processes, p);
      const size_t begin = static_cast<size_t>(chunk.offset);
      std::memcpy(static_cast<char*>(outputs[r.tensor].raw_data()) + (r.first + begin) * esize,
                  areas[static_cast<size_t>(p)] + r.offset + begin * esize,
                  static_cast<size_t>(chunk.size) * esize);
    }
  }
}

}  // namespace dtensor
