// Iteration over a broadcast: the output (contiguous, row-major) is walked as runs along its
// innermost coalesced dim, and in each run every input either advances with the output (step 1)
// or repeats one element (step 0). Kernels dispatch once on the steps (with_inner_steps) so that
// the inner loop is a plain contiguous loop the compiler vectorizes. Private to //kernels.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "runtime/shape.h"

namespace dtensor::kernels::cpu::internal {

template <size_t N>
class BroadcastPlan {
 public:
  // Each input shape must broadcast to `out` (checked by the caller).
  BroadcastPlan(const Shape& out, const std::array<const Shape*, N>& inputs) {
    total_ = num_elements(out);
    const size_t rank = out.size();
    std::array<std::vector<int64_t>, N> in_strides;
    for (size_t k = 0; k < N; ++k) {
      const Shape& in = *inputs[k];
      in_strides[k].assign(rank, 0);
      int64_t stride = 1;
      for (size_t j = in.size(); j-- > 0;) {
        size_t d = rank - in.size() + j;
        in_strides[k][d] = in[j] == 1 ? 0 : stride;
        stride *= in[j];
      }
    }
    // Drop size-1 dims and merge neighbours that every input walks contiguously (or not at all).
    for (size_t d = 0; d < rank; ++d) {
      if (out[d] == 1) continue;
      Dim dim{out[d], {}};
      for (size_t k = 0; k < N; ++k) dim.strides[k] = in_strides[k][d];
      if (!dims_.empty()) {
        Dim& prev = dims_.back();
        bool mergeable = true;
        for (size_t k = 0; k < N; ++k) {
          mergeable = mergeable && prev.strides[k] == dim.strides[k] * dim.size;
        }
        if (mergeable) {
          prev.size *= dim.size;
          prev.strides = dim.strides;
          continue;
        }
      }
      dims_.push_back(dim);
    }
    if (dims_.empty()) {
      inner_ = 1;
      inner_steps_.fill(1);
    } else {
      inner_ = dims_.back().size;
      for (size_t k = 0; k < N; ++k) inner_steps_[k] = dims_.back().strides[k];
      dims_.pop_back();
    }
  }

  // Length of each run.
  int64_t inner() const { return inner_; }
  // 1 if input k advances along the run, 0 if it repeats one element.
  int64_t inner_step(size_t k) const { return inner_steps_[k]; }

  // Calls fn(out_offset, in_offsets) for the start of every run, in output order.
  template <typename Fn>
  void for_each_run(Fn&& fn) const {
    if (total_ == 0) return;
    std::array<int64_t, N> offsets{};
    const size_t outer_rank = dims_.size();
    if (outer_rank == 0) {
      fn(int64_t{0}, offsets);
      return;
    }
    std::vector<int64_t> index(outer_rank, 0);
    const int64_t runs = total_ / inner_;
    for (int64_t run = 0; run < runs; ++run) {
      fn(run * inner_, offsets);
      // Odometer over the outer dims, updating every input's offset incrementally.
      for (size_t d = outer_rank; d-- > 0;) {
        const Dim& dim = dims_[d];
        if (++index[d] < dim.size) {
          for (size_t k = 0; k < N; ++k) offsets[k] += dim.strides[k];
          break;
        }
        index[d] = 0;
        for (size_t k = 0; k < N; ++k) offsets[k] -= dim.strides[k] * (dim.size - 1);
      }
    }
  }

 private:
  struct Dim {
    int64_t size;
    std::array<int64_t, N> strides;
  };
  std::vector<Dim> dims_;  // outer dims, outermost first
  int64_t total_ = 0;
  int64_t inner_ = 1;
  std::array<int64_t, N> inner_steps_{};
};

template <int64_t S>
using Step = std::integral_constant<int64_t, S>;

// Calls fn(Step<s0>{}, ..., Step<sN-1>{}) with the plan's inner steps as compile-time constants.
template <size_t N, size_t I = 0, typename Fn, typename... Steps>
void with_inner_steps(const BroadcastPlan<N>& plan, Fn&& fn, Steps... steps) {
  if constexpr (I == N) {
    fn(steps...);
  } else if (plan.inner_step(I) == 1) {
    with_inner_steps<N, I + 1>(plan, fn, steps..., Step<1>{});
  } else {
    with_inner_steps<N, I + 1>(plan, fn, steps..., Step<0>{});
  }
}

}  // namespace dtensor::kernels::cpu::internal
