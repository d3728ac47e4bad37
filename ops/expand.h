// Expansion: running an op's local kernel on every local shard.
//
// After the sharding rule has fixed the layouts and the inputs have been relayouted, every local
// device computes its output shard from its input shards with the local kernel. Devices whose
// input shards are the very same buffers (replicated operands of in-process devices) compute once
// and share the result. Distinct computations run on the thread pool when there is enough work
// to pay for waking it, each with a share of the BLAS threads; small ones run inline.
#pragma once

#include <functional>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor {

// The input shards of one device, by position (no copies of the Tensor handles).
class Shards {
 public:
  explicit Shards(const Tensor* const* shards) : shards_(shards) {}
  const Tensor& operator[](size_t i) const { return *shards_[i]; }

 private:
  const Tensor* const* shards_;
};

using LocalKernel = std::function<Tensor(const Shards& shards)>;

// How the calls of one kernel on several devices may be merged into fewer, larger calls.
struct Stacking {
  // >= 0: the kernel is row-separable in that input: a rank-2 input whose row r gives output
  // row r (matmul's left operand: the contraction is per row). When the other inputs are the
  // same buffers on every device (a replicated weight), the devices' rows are stacked into one
  // kernel call and the result split back by rows: one call on all threads instead of one per
  // device, and the shared operand prepared (BLAS packing) once. On CPU meshes neither step
  // copies where it need not: each device's rows of the result are a view of it
  // (Tensor::leading_view; a copy where a view would start misaligned), and input shards that are
  // such views, adjacent and in order, are stacked as they lie (Tensor::joined_view). Views are
  // never unique, so no in-place writer changes rows another device reads. Devices whose rows
  // are the same logical shard (replicas, even in distinct buffers) are stacked once and share
  // the result: a BLAS gives a row bits that depend on its position in the call, and replicas
  // must hold identical bits.
  int rows_of = -1;
  // Non-empty: input k's axis contraction_axes[k] is one the kernel sums over (matmul's K: aᵀb
  // sums over dim 0 of both, ab over dim 1 of a and dim 0 of b), so its value on inputs
  // concatenated along those axes is the sum of its values on the parts. When the output is a
  // partial sum, the local devices of each partial group (those differing only along the partial
  // mesh dims) then run as one call on their concatenated inputs (adjacent views along axis 0
  // as they lie, see rows_of), which adds their terms inside the kernel: the first member's shard
  // holds the group's sum and the others hold shared zeros (Tensor::shared_zeros), which reductions
  // skip. The later all-reduce across the group only moves the one sum; a group that spans
  // processes sends one term per process. An axis of kShared (not the first input's): an operand
  // that every device of a partial group holds alike (a table shard's row range), handed whole to
  // every call.
  std::vector<int64_t> contraction_axes;
  static constexpr int64_t kShared = -1;
  // > 0, with a floating output: the sum is batch-invariant. The kernel runs on chunks of this
  // many rows of the contraction axes (counted from the start of the global axis; axis 0 but in
  // the deterministic mode), one BLAS thread each, and the chunk values add in order (in f64,
  // rounded once). A partial group's members give their chunks without being put together when
  // their shards start on chunk boundaries (are put together first otherwise), so one device and
  // any in-process split of the axis compute the same bits: towers train exactly like one device.
  int64_t chunk_rows = 0;
  // With chunk_rows: a kernel that sums the chunks itself, to the bits of the chunked sum (each
  // chunk's value added in order in f64 from zero, rounded once, counting chunks from the start
  // of its contraction axes). A group of in-process terms then runs it once on its inputs put
  // together (CPU meshes; not across processes in the deterministic mode), instead of one
  // output-sized value per chunk: an embedding's scatter-add touches few rows of its table.
  LocalKernel fold_chunks;
  // The op, for errors (a string literal; op_internal's expand sets it).
  const char* op = "run_local";
};

// The deterministic mode (one switch: DTENSOR_DETERMINISTIC=1 in the environment, read once):
// every float sum is layout-invariant, so that one device, any mesh (a contraction split over
// model or seq included) and any number of processes and hosts give the same bits. Every float
// contraction is chunked, on one device as well: matmul's K (any rank), each axis of a
// reduce_sum/mean in turn (last first), the softmax family composed from those reductions on
// every layout, an embedding's scatter-add in chunks of its batch on every layout; partial operands
// are reduced first, and small sums are cut into eight chunks too. A partial group's chunk values
// add in the one-process order on its first member, zeros elsewhere, so that the collective that
// completes it adds exact zeros; a group that spans processes first exchanges its members' chunk
// values (an all-to-all: each member gets its share of the elements of every chunk). For jobs that
// must reproduce a run exactly: bench/deterministic_cost.sh measures the cost.
bool deterministic_sums();

// The chunk of a batch-invariant sum over an axis of global size `extent` (Stacking::chunk_rows):
// eight chunks, so that splits over 1, 2, 4 or 8 devices of a multiple of 8 fall on their
// boundaries; `extent` itself (one chunk: the group is put together) when the whole sum is under
// `small_work` elements, where chunk calls would cost more than the copy, unless
// deterministic_sums() is on (processes cannot put a group together).
int64_t invariant_chunk_rows(int64_t extent, double work, double small_work = 65536);

// `inputs` are already in the layouts the rule chose; `work` estimates the flops (or bytes) of
// the whole op, to decide between inline and parallel execution. While a step is captured
// (train/capture/function.h) the recorder keeps a copy of `kernel` to replay: a kernel must own
// what it uses (capture by value, never references to the op's locals). With `stacking`, BLAS may
// pick other kernels for the taller matrices, so results agree with per-device calls to rounding.
DTensor run_local(const std::vector<const DTensor*>& inputs, const Layout& output_layout,
                  const Shape& output_shape, DType output_dtype, double work,
                  const LocalKernel& kernel, Stacking stacking = {});

// The BLAS threads a kernel running on the current thread may use (set by run_local).
int local_blas_threads();

}  // namespace dtensor
