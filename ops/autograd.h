// Reverse-mode autograd over DTensors: a gradient tape (TF's tf.GradientTape).
//
// While a GradientTape is alive on a thread, every op on that thread whose inputs depend on a
// watched value records itself with its vector-Jacobian product. The VJPs are written with
// DTensor ops, so backward passes are sharded and expanded like forward ones, and gradients come
// out in whatever layout the expansion gives: the gradient of a replicated weight from
// batch-sharded activations is partial over `batch`. gradient() for DVariables brings each
// gradient to its variable's layout, which is where that partial sum is reduced, once.
//
// Gradients are keyed by value identity (DTensor::id). An op that returns its input unchanged
// (a cast to the same dtype, a relayout to the same layout) keeps that identity and records
// nothing, so the gradient passes through it once. Every value a DVariable holds, before and after
// assign, shares the variable's one value id: watch(variable) tracks every read of it, and the
// gradient of a variable sums over all its reads (TF's semantics).
//
// relayout (dtensor/relayout.h) records itself on active tapes, which hear of it through the
// capture seam (dtensor/step_observer.h, whatever traces the step): its VJP relayouts the gradient
// back. An op that computes a floating value from a tracked one without recording a VJP leaves a
// placeholder on the tape, and gradient() throws UnimplementedError naming the op when the
// gradient reaches it: a gradient is never silently dropped.
//
// Tapes are per thread and may nest; a tape is not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/variable.h"

namespace dtensor {

class GradientTape {
 public:
  GradientTape();
  ~GradientTape();
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  void watch(const DTensor& x);
  void watch(const DVariable& v);

  // d target / d source for each source (target must be a scalar, or its gradient is taken as
  // ones). Sources the target does not depend on get zeros in their own layout.
  std::vector<DTensor> gradient(const DTensor& target, const std::vector<DTensor>& sources);
  // As above, each gradient relayouted to its variable's layout.
  std::vector<DTensor> gradient(const DTensor& target, const std::vector<DVariable>& sources);

  struct Record;

 private:
  std::vector<Record> records_;
  std::vector<int64_t> watched_;
  friend void record_on_tapes(const std::vector<const DTensor*>&, const DTensor&,
                              std::function<std::vector<std::optional<DTensor>>(const DTensor&)>,
                              bool);
};

using Vjp = std::function<std::vector<std::optional<DTensor>>(const DTensor& grad)>;

// Pauses recording on this thread for its lifetime: ops composed of other ops record only
// themselves, and VJPs are not recorded.
class NoRecord {
 public:
  NoRecord();
  ~NoRecord();
  NoRecord(const NoRecord&) = delete;
  NoRecord& operator=(const NoRecord&) = delete;
};

// For op implementations: whether any tape is recording on this thread, and recording one op
// (its inputs, output and VJP) on every active tape that tracks one of the inputs.
// An op whose output is one of its inputs (an identity) is not recorded: the value, and so its
// gradient, is the input's. Recording an output for which note_untraced left a placeholder
// replaces the placeholder.
bool tape_active();
void record_op(const std::vector<const DTensor*>& inputs, const DTensor& output, Vjp vjp);

// For op expansions: the op named `op` (its public name, as errors print it; anything from ':'
// or ',' on is taken for attributes and left out) computed `output` from `inputs`. While a tape
// records and `output` is floating and depends on a watched value, this leaves a placeholder whose
// VJP throws UnimplementedError naming the op; an op with a VJP replaces it by recording `output`
// (or runs its forward pass under NoRecord, so nothing is left).
void note_untraced(const char* op, const std::vector<const DTensor*>& inputs,
                   const DTensor& output);

// For VJPs: false while a tape runs the VJP of an op whose input `input` depends on no watched
// value (data, labels), so that the gradient would be dropped: the VJP may leave it out (nullopt)
// instead of computing it, as matmul's does for its activations' gradient in the first layer.
// True otherwise.
bool gradient_needed(size_t input);

// ---- Overlapped gradient reduction across processes ----
//
// In a job of several processes, GradientTape::gradient for DVariables starts the reduction of a
// variable's gradient as soon as backward has finished it (no later record contributes), when the
// gradient is a partial sum over mesh dims whose groups span processes (the data-parallel
// all-reduce). Finished gradients are queued in buckets, in the order backward finishes them (the
// same on every process); a bucket is sent as one nonblocking all-reduce (all_reduce_start) once
// it holds bucket_cap_mb (the first one: 1 MiB at most, as in PyTorch DDP, so that a small model
// starts reducing before backward ends), and backward goes on meanwhile, letting the buckets in
// flight progress after each record. At the end every bucket is waited for
// and each gradient brought to its variable's layout. The local reduction over a process's devices
// is the blocking path's, so results are bitwise those of the blocking reduction (with processes
// on one host, which fold in process order whatever the bucket, or two processes anywhere; over
// more processes on several hosts MPI may associate the sum differently for other message sizes).
struct GradientReductionOptions {
  bool overlap = true;
  double bucket_cap_mb = 25.0;  // like PyTorch DDP's bucket_cap_mb; > 0
};

// Process-wide; set before training (InvalidArgumentError for bucket_cap_mb <= 0 or not finite).
void set_gradient_reduction_options(const GradientReductionOptions& options);
GradientReductionOptions gradient_reduction_options();

}  // namespace dtensor
