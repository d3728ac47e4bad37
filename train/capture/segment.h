// Segment: consecutive elementwise calls of a captured step (train/capture/elementwise.h) on one
// per-device geometry, replayed as one fused pass. Each device's elements are walked in blocks
// that fit the cache; for each block every call applies its kernel's own element routine
// (kernels/cpu/{unary,binary}.h; an f32 <-> bf16 cast runs cast()'s loop), so the bits are eager's.
// A cast ending a chain thus writes its narrow result straight from the block, and the wide value
// before it is written only when something reads it later. Values used only inside the
// segment live in per-block registers and are never materialised; values read after it (by a
// later call or as a result of the step) are written into planned shards: the buffers of the last
// replay when no one else holds them any more, else an input that dies in the segment, that no
// one else holds and that has the result's shape, dtype and layout (in place: its shards are
// the result's shards), else fresh ones. Devices whose inputs
// are the same buffers (replicated operands) compute once and share the results, as eager does.
//
// Ownership: the segment owns its plan and scratch; run() reads and writes the program's slots.
// Thread-safety: run() mutates the scratch; one replay at a time. Inside run(), computations big
// enough run on the thread pool, each with registers of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <vector>

#include "train/capture/elementwise.h"
#include "train/capture/slot.h"

namespace dtensor::capture {

class Segment {
 public:
  // One call of the segment, in program order.
  struct Call {
    const ElementwiseCall* elementwise;
    std::vector<int> inputs;  // slots
    // Per input: the shape, dtype and layout the call saw it with (nullopt: bare shards).
    std::vector<std::optional<ValueMeta>> input_meta;
    int output;  // slot
    // The step's view of the result (what the slot must hold when it is read later).
    ValueMeta result;
  };

  // `read_later(slot)` tells whether a value is read after the segment (or returned, or kept).
  Segment(const std::vector<Call>& calls, const std::function<bool(int)>& read_later);

  // Computes every call's result into `slots`: the results read later become DTensors there.
  void run(std::vector<Slot>& slots);

  size_t num_calls() const { return ops_.size(); }
  // The values written out (the others stay in per-block registers).
  size_t num_results() const { return written_.size(); }

 private:
  // Where an operand or a result lives during a replay.
  struct Source {
    enum class Kind : uint8_t { kExternal, kRegister, kWritten };
    Kind kind;
    int32_t index;  // into external_slots_, registers, or written_
  };
  struct Op {
    ElementwiseNote::Kind kind;
    int op;
    DType dtype;                 // the operands'
    DType out_dtype;             // the result's (differs for casts)
    uint32_t in_size, out_size;  // element sizes of the operands and of the result
    int arity;
    Source in[2];
    Source out;
  };
  struct Written {
    int slot;
    size_t op;  // the call that makes it
    ValueMeta meta;
    int32_t takes_over;  // an external input whose buffer may take this result, or -1
  };

  void build(const std::vector<Call>& calls, const std::vector<bool>& later,
             const std::function<bool(int)>& read_later);
  // Picks, for results written out, inputs that die in the segment to write them into.
  void plan_take_over(const std::vector<Call>& calls, const std::function<bool(int)>& read_later);
  // The buffer result `w` of device `d` is written into this replay (see the header comment).
  Tensor output_buffer(size_t w, size_t d, const std::vector<Slot>& slots);
  void group_devices(const std::vector<Slot>& slots);
  void run_device(size_t device);

  size_t devices_ = 0;
  std::vector<Op> ops_;
  std::vector<ElementwiseOperand> operands_;  // [(op * devices_ + device) * 2 + k]
  std::vector<Shape> shapes_;                 // [op * devices_ + device]
  std::vector<int> external_slots_;
  std::vector<std::optional<ValueMeta>> external_meta_;  // per external: as its first reader saw it
  std::vector<Written> written_;
  std::vector<Device> device_of_;
  std::vector<int64_t> elements_;  // per device
  std::vector<int64_t> block_;     // per device: elements per block
  int64_t most_block_ = 0;
  int num_registers_ = 0;
  // Per device: num_registers_ blocks of most_block_ 8-byte elements.
  std::vector<unsigned char> scratch_;
  // During a replay.
  std::vector<const unsigned char*> external_data_;  // [external * devices_ + device]
  std::vector<unsigned char*> written_data_;         // [written * devices_ + device]
  std::vector<std::vector<Tensor>> written_shards_;  // [written][device]
  // Between replays: the buffers results were last written into, reused while no one else
  // holds them. [written * devices_ + device]
  std::vector<Tensor> planned_;
  std::vector<size_t> first_of_group_;  // the devices that compute
  std::vector<size_t> group_of_;        // per device: its computing device
};

}  // namespace dtensor::capture
