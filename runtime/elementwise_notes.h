// ElementwiseNotes: how a recorder learns the structure of the elementwise kernel calls a traced
// step makes, so that a replay can fuse them (train/capture/program.h). Not a hook on the step:
// the recorder takes the step's work through dtensor/step_observer.h; this is only a sink for what
// the kernels below it describe. While at least one sink is registered, the CPU unary, binary and
// f32 <-> bf16 cast kernels describe each call they complete (the op, the dtype, the input and
// output buffers); a recorder matches the notes to its call by the output buffers, which are fresh,
// so notes from other threads (pool workers running the traced call, or unrelated work) never
// mismatch. With no sink registered a kernel pays one relaxed load.
//
// Thread-safety: note() and the registration lock one mutex; a sink is read by its owner only
// after the call it traced returned.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/dtype.h"

namespace dtensor {

struct ElementwiseNote {
  enum class Kind : uint8_t { kUnary, kBinary, kCast };
  Kind kind;
  int op;       // kernels::UnaryOp, kernels::BinaryOp, or (kCast) the result's DType
  DType dtype;  // the inputs' (kCast: the source dtype)
  const void* inputs[2];
  const void* output;
};

class ElementwiseNotes {
 public:
  static bool on() { return sinks_.load(std::memory_order_relaxed) > 0; }
  static void note(const ElementwiseNote& n) {
    std::lock_guard<std::mutex> lock(mutex());
    for (std::vector<ElementwiseNote>* sink : registry()) sink->push_back(n);
  }
  // Registers `sink` until the matching remove(); it receives every note made meanwhile.
  static void add(std::vector<ElementwiseNote>* sink) {
    std::lock_guard<std::mutex> lock(mutex());
    registry().push_back(sink);
    sinks_.fetch_add(1, std::memory_order_relaxed);
  }
  static void remove(std::vector<ElementwiseNote>* sink) {
    std::lock_guard<std::mutex> lock(mutex());
    std::vector<std::vector<ElementwiseNote>*>& r = registry();
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] == sink) {
        r.erase(r.begin() + static_cast<std::ptrdiff_t>(i));
        sinks_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
    }
  }
  // A copy of `sink` taken under the lock (another thread may be appending to it).
  static std::vector<ElementwiseNote> take(std::vector<ElementwiseNote>* sink) {
    std::lock_guard<std::mutex> lock(mutex());
    std::vector<ElementwiseNote> out;
    out.swap(*sink);
    return out;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::vector<ElementwiseNote>*>& registry() {
    static std::vector<std::vector<ElementwiseNote>*> r;
    return r;
  }
  static inline std::atomic<int> sinks_{0};
};

}  // namespace dtensor
