// The seed MLP's training step written by hand: OpenBLAS calls and plain loops on flat arrays,
// no layouts, dispatch or tape. bench/train_step runs it next to the runtime's step, so the
// runtime's figure can be read against what the machine gives the same arithmetic that day.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace dtensor::bench {

// 64-byte aligned storage, as the runtime's tensors have (BLAS packs aligned rows faster).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  friend bool operator==(const Aligned64&, const Aligned64&) { return true; }
  friend bool operator!=(const Aligned64&, const Aligned64&) { return false; }
};
using Floats = std::vector<float, Aligned64<float>>;

class PlainMlp {
 public:
  // Layer sizes (784, 700, 500, 10) and the batch; weights small and deterministic.
  PlainMlp(std::vector<int> sizes, int batch);
  // Forward, softmax cross-entropy, backward and Adam (lr 1e-3); returns the loss.
  float step(const float* images, const int32_t* labels);

 private:
  std::vector<int> sizes_;
  int batch_;
  int64_t t_ = 0;
  // Per layer: weights, bias, their gradients and Adam's two slots for both.
  std::vector<Floats> w_, b_, dw_, db_, mw_, vw_, mb_, vb_;
  std::vector<Floats> act_;  // act_[0] unused; act_[l] the output of layer l
  Floats grad_in_;
};

}  // namespace dtensor::bench
