#include "runtime/mpi/shared_pair.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/error.h"

namespace dtensor {
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
bool reached(uint32_t seen, uint32_t target) {
  return static_cast<int32_t>(seen - target) >= 0;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a wait spins before it sleeps: long enough for the other process to arrive when it
// is running on another core, short enough that a wait for a busy process gives the core away.
constexpr int kSpins = 4000;

constexpr size_t kRunAlignment = 64;

int64_t total_elements(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.num_elements();
  return n;
}

size_t align_up(size_t n) { return (n + kRunAlignment - 1) / kRunAlignment * kRunAlignment; }

// One element of both processes combined: process 0's value first.
template <typename T>
T combine(T first, T second, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == ReduceOp::kMin ? (first && second) : (first || second);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const float x = static_cast<float>(first), y = static_cast<float>(second);
    if (op == ReduceOp::kMax) return BFloat16(max_propagating_nan(x, y));
    if (op == ReduceOp::kMin) return BFloat16(min_propagating_nan(x, y));
    return BFloat16(x + y);
  } else {
    if (op == ReduceOp::kMax) return max_propagating_nan(first, second);
    if (op == ReduceOp::kMin) return min_propagating_nan(first, second);
    if constexpr (std::is_integral_v<T>) {  // wraps, as MPI_SUM does on these machines
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(first) + static_cast<U>(second));
    } else {
      return first + second;
    }
  }
}

// out[i] = combine(zero[i], one[i]); also written back to `back` (this process's area).
template <typename T>
void combine_span(const T* __restrict zero, const T* __restrict one, T* __restrict out,
                  T* back, size_t n, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < n; ++i) out[i] = combine(zero[i], one[i], ReduceOp::kSum);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = combine(zero[i], one[i], op);
  }
  std::memcpy(back, out, n * sizeof(T));
}

template <typename Fn>
void with_element_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF64:
      return fn(double{});
    case DType::kBF16:
      return fn(BFloat16{});
    case DType::kI32:
      return fn(int32_t{});
    case DType::kI64:
      return fn(int64_t{});
    case DType::kBool:
      return fn(bool{});
  }
}

}  // namespace

struct SharedPair::Run {
  size_t tensor;  // index into the bucket
  size_t first;   // first element
  size_t count;   // elements
  size_t offset;  // bytes into the area
};

SharedPair::SharedPair(void* mine, void* peer, int self)
    : mine_(static_cast<char*>(mine)),
      peer_(static_cast<char*>(peer)),
      self_(self),
      my_step_(reinterpret_cast<std::atomic<uint32_t>*>(mine_)),
      peer_step_(reinterpret_cast<std::atomic<uint32_t>*>(peer_)),
      my_sleeper_(reinterpret_cast<std::atomic<uint32_t>*>(mine_ + 4)),
      peer_sleeper_(reinterpret_cast<std::atomic<uint32_t>*>(peer_ + 4)),
      my_check_(reinterpret_cast<uint64_t*>(mine_ + 64)),
      peer_check_(reinterpret_cast<const uint64_t*>(peer_ + 64)) {}

char* SharedPair::area(char* segment, uint64_t piece) const {
  return segment + kHeaderBytes + (piece % 2) * kAreaBytes;
}

void SharedPair::arrive_and_wait() {
  const uint32_t step = ++step_;
  // Sequentially consistent with the sleeper's flag below: either it sees the new step before it
  // sleeps, or this sees its flag and wakes it. (A lost race costs one futex timeout, no more.)
  my_step_->store(step, std::memory_order_seq_cst);
  if (my_sleeper_->load(std::memory_order_seq_cst) != 0) {
    my_sleeper_->store(0, std::memory_order_relaxed);
    futex_wake(my_step_);
  }
  for (int i = 0; i < kSpins; ++i) {
    if (reached(peer_step_->load(std::memory_order_acquire), step)) return;
    cpu_relax();
  }
  for (;;) {
    peer_sleeper_->store(1, std::memory_order_seq_cst);
    const uint32_t seen = peer_step_->load(std::memory_order_seq_cst);
    if (reached(seen, step)) return;
    futex_wait(peer_step_, seen);
  }
}

void SharedPair::all_reduce(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                            ReduceOp op, const char* function) {
  // The whole bucket's description goes into every piece's check, so two different buckets differ
  // at their first piece (rather than one process waiting for a piece the other never sends).
  bucket_check_ = static_cast<uint64_t>(op) * 0x9e3779b97f4a7c15ull + inputs.size();
  for (const Tensor& in : inputs) {
    bucket_check_ = bucket_check_ * 1099511628211ull +
                    static_cast<uint64_t>(in.num_elements()) * 8 + static_cast<uint64_t>(in.dtype());
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
      const size_t room = at < kAreaBytes ? (kAreaBytes - at) / esize : 0;
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
  // A bucket of empty tensors still meets the other process once, so both check they agree.
  if (!runs.empty() || pieces_ == pieces_before) reduce_piece(runs, inputs, outputs, op, function);
}

void SharedPair::reduce_piece(const std::vector<Run>& runs, const std::vector<Tensor>& inputs,
                              std::vector<Tensor>& outputs, ReduceOp op, const char* function) {
  char* mine = area(mine_, pieces_);
  const char* peer = area(peer_, pieces_);
  ++pieces_;
  // What this piece holds, for the check against the other process.
  const uint64_t check = bucket_check_ + pieces_;
  for (const Run& r : runs) {
    const size_t esize = dtype_size(inputs[r.tensor].dtype());
    std::memcpy(mine + r.offset, static_cast<const char*>(inputs[r.tensor].raw_data()) +
                                     r.first * esize,
                r.count * esize);
  }
  *my_check_ = check;
  arrive_and_wait();
  if (*peer_check_ != check) {
    throw_error<CommunicationError>(
        function,
        "the two processes reduce different tensors (this process: {} tensors, {} elements); "
        "every process must make the same collective calls, with the same shapes, dtypes "
        "and op, in the same order",
        inputs.size(), total_elements(inputs));
  }
  const char* zero = self_ == 0 ? mine : peer;
  const char* one = self_ == 0 ? peer : mine;
  for (const Run& r : runs) {
    const size_t half = r.count / 2;
    const size_t begin = self_ == 0 ? 0 : half, end = self_ == 0 ? half : r.count;
    with_element_type(inputs[r.tensor].dtype(), [&](auto tag) {
      using T = decltype(tag);
      const size_t at = r.offset + begin * sizeof(T);
      combine_span(reinterpret_cast<const T*>(zero + at), reinterpret_cast<const T*>(one + at),
                   static_cast<T*>(outputs[r.tensor].raw_data()) + r.first + begin,
                   reinterpret_cast<T*>(mine + at), end - begin, op);
    });
  }
  arrive_and_wait();
  for (const Run& r : runs) {
    const size_t esize = dtype_size(inputs[r.tensor].dtype());
    const size_t half = r.count / 2;
    const size_t begin = self_ == 0 ? half : 0, end = self_ == 0 ? r.count : half;
    std::memcpy(static_cast<char*>(outputs[r.tensor].raw_data()) + (r.first + begin) * esize,
                peer + r.offset + begin * esize, (end - begin) * esize);
  }
}

}  // namespace dtensor
