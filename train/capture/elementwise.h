// ElementwiseCall: the structured form of a traced run_local call whose kernel was one CPU
// elementwise kernel (unary, binary with broadcasting, or an f32 <-> bf16 cast), recovered from the
// kernels' notes (runtime/elementwise_notes.h). It says what each device computed in terms a fused
// segment can run over blocks of elements (train/capture/segment.h): the op, the dtype, each
// device's output shard shape, and how each operand's elements line up with the output's.
//
// Plain values; built by the recorder, read by Program::finish. Thread-safety: none needed.
#pragma once

#include <optional>
#include <vector>

#include "dtensor/dtensor.h"
#include "dtensor/step_observer.h"
#include "runtime/elementwise_notes.h"

namespace dtensor::capture {

// How output element i of a device reads one operand's shard.
struct ElementwiseOperand {
  enum class Mode : uint8_t {
    kFull,    // element i
    kRepeat,  // element 0 (a scalar broadcast)
    kRows,    // element i % period (a suffix of the output's dims, broadcast over the rest)
  };
  Mode mode = Mode::kFull;
  int64_t period = 0;  // kRows only
};

struct ElementwiseCall {
  ElementwiseNote::Kind kind;
  int op;                     // kernels::UnaryOp or kernels::BinaryOp (unused for kCast)
  DType dtype;                // the operands'
  DType out_dtype;            // the result's: dtype, or a cast's target
  int arity;                  // 1 or 2
  std::vector<Shape> shapes;  // per local device: the output shard's shape
  std::vector<ElementwiseOperand> operands;  // [device * arity + k]
  // The period a block of this call must be a multiple of on `device` (1 without kRows).
  int64_t period(size_t device) const;
};

// The longest row period a fused segment accepts: its blocks are a multiple of it.
constexpr int64_t kMaxElementwisePeriod = 1 << 14;

// The call `inputs` -> `out` as an ElementwiseCall when `notes` show that every local device's
// output shard came from one write-into capable elementwise kernel call on that device's input
// shards; nullopt otherwise (the call then replays as an opaque closure).
std::optional<ElementwiseCall> match_elementwise(const std::vector<ElementwiseNote>& notes,
                                                 const std::vector<const DTensor*>& inputs,
                                                 const DTensor& out);

}  // namespace dtensor::capture
