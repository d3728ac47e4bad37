#include "train/capture/segment.h"

#include <algorithm>
#include <map>

#include "runtime/thread_pool.h"

#include "kernels/cpu/binary.h"
#include "kernels/cpu/unary.h"

namespace dtensor::capture {
namespace {

// Elements per block: a few values of this many 8-byte elements stay in the L1/L2 caches.
constexpr int64_t kBlockElements = 2048;
constexpr size_t kMaxElementSize = 8;
// Below this many element operations in all (every computing device's together) the pool costs
// more than it saves. run_local's threshold is per computation (2e5, ops/expand.cc, which also
// shares out BLAS threads); applied per device here it left the seed step's relu-grad segments
// (8 devices x 11,200 elements x 3 ops) and its input cast on one of the two cores.
constexpr double kParallelWork = 1e5;

}  // namespace

Segment::Segment(const std::vector<Call>& calls, const std::function<bool(int)>& read_later) {
  std::vector<bool> later;
  later.reserve(calls.size());
  for (const Call& c : calls) later.push_back(read_later(c.output));
  build(calls, later, read_later);
}

void Segment::plan_take_over(const std::vector<Call>& calls,
                             const std::function<bool(int)>& read_later) {
  // Per external input: the last call reading it, and whether every read is whole (kFull).
  std::vector<int64_t> last_read(external_slots_.size(), -1);
  std::vector<bool> whole(external_slots_.size(), true);
  for (size_t o = 0; o < ops_.size(); ++o) {
    for (int k = 0; k < ops_[o].arity; ++k) {
      const Source& src = ops_[o].in[k];
      if (src.kind != Source::Kind::kExternal) continue;
      last_read[static_cast<size_t>(src.index)] = static_cast<int64_t>(o);
      for (size_t d = 0; d < devices_; ++d) {
        whole[static_cast<size_t>(src.index)] =
            whole[static_cast<size_t>(src.index)] &&
            operands_[(o * devices_ + d) * 2 + static_cast<size_t>(k)].mode ==
                ElementwiseOperand::Mode::kFull;
      }
    }
  }
  std::vector<bool> taken(external_slots_.size(), false);
  for (Written& w : written_) {
    for (size_t x = 0; x < external_slots_.size(); ++x) {
      // Read for the last time by an earlier call of the segment: each block has read it by the
      // time this result's block is written, and later blocks are still untouched.
      // Its buffers become the result's shards: they must be of the result's shape, dtype and
      // layout (an input of the same element count may be of another geometry, say [8,2] per
      // device where the result is [1,16]).
      if (taken[x] || !whole[x] || last_read[x] < 0 || last_read[x] >= static_cast<int64_t>(w.op) ||
          read_later(external_slots_[x]) || !external_meta_[x] || !(*external_meta_[x] == w.meta)) {
        continue;
      }
      taken[x] = true;
      w.takes_over = static_cast<int32_t>(x);
      break;
    }
  }
}

void Segment::build(const std::vector<Call>& calls, const std::vector<bool>& later,
                    const std::function<bool(int)>& read_later) {
  devices_ = calls[0].elementwise->shapes.size();
  const Mesh& mesh = calls[0].result.layout.mesh();
  for (int64_t id : mesh.local_device_ids()) device_of_.push_back(Device{mesh.device_type(), id});
  // The last call of the segment reading each slot (registers are freed after it).
  std::map<int, size_t> last_use;
  for (size_t i = 0; i < calls.size(); ++i) {
    for (int s : calls[i].inputs) last_use[s] = i;
  }
  std::map<int, Source> produced;
  std::map<int, int32_t> external;
  std::vector<int32_t> free_registers;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const ElementwiseCall& e = *c.elementwise;
    Op op{e.kind,
          e.op,
          e.dtype,
          e.out_dtype,
          static_cast<uint32_t>(dtype_size(e.dtype)),
          static_cast<uint32_t>(dtype_size(e.out_dtype)),
          e.arity,
          {},
          {}};
    for (int k = 0; k < e.arity; ++k) {
      const int s = c.inputs[static_cast<size_t>(k)];
      auto it = produced.find(s);
      if (it != produced.end()) {
        op.in[k] = it->second;
        continue;
      }
      auto [ext, added] = external.emplace(s, static_cast<int32_t>(external_slots_.size()));
      if (added) {
        external_slots_.push_back(s);
        external_meta_.push_back(c.input_meta[static_cast<size_t>(k)]);
      } else if (external_meta_[static_cast<size_t>(ext->second)] !=
                 c.input_meta[static_cast<size_t>(k)]) {
        external_meta_[static_cast<size_t>(ext->second)].reset();  // seen two ways: never taken
      }
      op.in[k] = {Source::Kind::kExternal, ext->second};
    }
    // The result takes a register only after the inputs were read: it never overlaps them.
    if (later[i]) {
      op.out = {Source::Kind::kWritten, static_cast<int32_t>(written_.size())};
      written_.push_back({c.output, i, c.result, -1});
    } else {
      int32_t r;
      if (free_registers.empty()) {
        r = num_registers_++;
      } else {
        r = free_registers.back();
        free_registers.pop_back();
      }
      op.out = {Source::Kind::kRegister, r};
    }
    produced[c.output] = op.out;
    for (int k = 0; k < e.arity; ++k) {
      const int s = c.inputs[static_cast<size_t>(k)];
      const Source& in = op.in[k];
      const bool dies = last_use[s] == i && (k == 0 || s != c.inputs[0]);
      if (in.kind == Source::Kind::kRegister && dies) free_registers.push_back(in.index);
    }
    auto used = last_use.find(c.output);
    if (op.out.kind == Source::Kind::kRegister && used == last_use.end()) {
      free_registers.push_back(op.out.index);  // a result no one reads
    }
    ops_.push_back(op);
    for (size_t d = 0; d < devices_; ++d) {
      shapes_.push_back(e.shapes[d]);
      for (int k = 0; k < 2; ++k) {
        operands_.push_back(
            k < e.arity ? e.operands[d * static_cast<size_t>(e.arity) + static_cast<size_t>(k)]
                        : ElementwiseOperand{});
      }
    }
  }
  plan_take_over(calls, read_later);
  for (size_t d = 0; d < devices_; ++d) {
    const int64_t n = num_elements(calls[0].elementwise->shapes[d]);
    int64_t period = 1;
    for (const Call& c : calls) period = std::lcm(period, c.elementwise->period(d));
    int64_t block = std::max(period, kBlockElements / period * period);
    block = n == 0 ? 1 : std::min(block, n);  // n is a multiple of every period
    elements_.push_back(n);
    block_.push_back(block);
    most_block_ = std::max(most_block_, block);
  }
  // Registers per device: computations may run on several threads at once.
  scratch_.assign(devices_ * static_cast<size_t>(num_registers_) *
                      static_cast<size_t>(most_block_) * kMaxElementSize,
                  0);
  external_data_.assign(external_slots_.size() * devices_, nullptr);
  written_data_.assign(written_.size() * devices_, nullptr);
  written_shards_.assign(written_.size(), {});
  planned_.assign(written_.size() * devices_, Tensor());
  group_of_.assign(devices_, 0);
  first_of_group_.reserve(devices_);
}

void Segment::group_devices(const std::vector<Slot>& slots) {
  first_of_group_.clear();
  for (size_t d = 0; d < devices_; ++d) {
    size_t g = 0;
    for (; g < first_of_group_.size(); ++g) {
      bool same = true;
      for (size_t x = 0; x < external_slots_.size() && same; ++x) {
        const std::vector<Tensor>& shards =
            slots[static_cast<size_t>(external_slots_[x])].shards_of();
        same = shards[d].is_same_as(shards[first_of_group_[g]]);
      }
      if (same) break;
    }
    if (g == first_of_group_.size()) first_of_group_.push_back(d);
    group_of_[d] = first_of_group_[g];
  }
}

void Segment::run(std::vector<Slot>& slots) {
  for (size_t x = 0; x < external_slots_.size(); ++x) {
    const std::vector<Tensor>& shards = slots[static_cast<size_t>(external_slots_[x])].shards_of();
    for (size_t d = 0; d < devices_; ++d) {
      external_data_[x * devices_ + d] = static_cast<const unsigned char*>(shards[d].raw_data());
    }
  }
  group_devices(slots);
  for (size_t w = 0; w < written_.size(); ++w) {
    std::vector<Tensor>& shards = written_shards_[w];
    shards.resize(devices_);
    for (size_t d : first_of_group_) {
      shards[d] = output_buffer(w, d, slots);
      written_data_[w * devices_ + d] = static_cast<unsigned char*>(shards[d].raw_data());
    }
    for (size_t d = 0; d < devices_; ++d) {
      if (group_of_[d] != d) shards[d] = shards[group_of_[d]].with_device(device_of_[d]);
    }
  }
  // As run_local does: computations big enough to pay for waking the pool run on it.
  const int64_t groups = static_cast<int64_t>(first_of_group_.size());
  const double work = static_cast<double>(elements_[first_of_group_[0]]) *
                      static_cast<double>(ops_.size()) * static_cast<double>(groups);
  if (groups > 1 && work >= kParallelWork && !ThreadPool::in_worker()) {
    ThreadPool::global().parallel_for(
        groups, [this](int64_t g) { run_device(first_of_group_[static_cast<size_t>(g)]); });
  } else {
    for (size_t d : first_of_group_) run_device(d);
  }
  for (size_t w = 0; w < written_.size(); ++w) {
    const Written& out = written_[w];
    slots[static_cast<size_t>(out.slot)].value = DTensor::from_trusted_shards(
        out.meta.shape, out.meta.dtype, out.meta.layout, std::move(written_shards_[w]));
    written_shards_[w].clear();
  }
}

Tensor Segment::output_buffer(size_t w, size_t d, const std::vector<Slot>& slots) {
  Tensor& planned = planned_[w * devices_ + d];
  // The last replay's buffer, unless someone still holds it (a result the step returned, or a
  // value stored in a variable): that one is theirs now.
  if (planned.is_unique() && planned.num_elements() > 0) return planned;
  // An input that dies here, held by no one else (not even another device), takes the result.
  const int32_t x = written_[w].takes_over;
  if (x >= 0) {
    const Tensor& in =
        slots[static_cast<size_t>(external_slots_[static_cast<size_t>(x)])].shards_of()[d];
    if (in.is_unique() && in.device() == device_of_[d] &&
        in.shape() == shapes_[written_[w].op * devices_ + d]) {
      planned = Tensor();
      return in;
    }
  }
  planned =
      Tensor::empty(shapes_[written_[w].op * devices_ + d], written_[w].meta.dtype, device_of_[d]);
  return planned;
}

void Segment::run_device(size_t d) {
  const int64_t n_all = elements_[d];
  const int64_t block = block_[d];
  const size_t register_bytes = static_cast<size_t>(most_block_) * kMaxElementSize;
  unsigned char* registers =
      scratch_.data() + d * static_cast<size_t>(num_registers_) * register_bytes;
  const unsigned char* const* external = external_data_.data();
  unsigned char* const* written = written_data_.data();
  for (int64_t b = 0; b < n_all; b += block) {
    const int64_t n = std::min(block, n_all - b);
    for (size_t o = 0; o < ops_.size(); ++o) {
      const Op& op = ops_[o];
      const size_t es = op.in_size;
      // The operand's elements for block-local position r (see ElementwiseOperand).
      auto operand = [&](int k, int64_t r) -> const unsigned char* {
        const Source& src = op.in[k];
        if (src.kind == Source::Kind::kRegister) {
          return registers + static_cast<size_t>(src.index) * register_bytes +
                 static_cast<size_t>(r) * es;
        }
        const unsigned char* base = src.kind == Source::Kind::kExternal
                                        ? external[static_cast<size_t>(src.index) * devices_ + d]
                                        : written[static_cast<size_t>(src.index) * devices_ + d];
        const ElementwiseOperand& mode = operands_[(o * devices_ + d) * 2 + static_cast<size_t>(k)];
        switch (mode.mode) {
          case ElementwiseOperand::Mode::kFull:
            return base + static_cast<size_t>(b + r) * es;
          case ElementwiseOperand::Mode::kRepeat:
            return base;
          case ElementwiseOperand::Mode::kRows:
            return base + static_cast<size_t>((b + r) % mode.period) * es;
        }
        return base;
      };
      unsigned char* out = op.out.kind == Source::Kind::kRegister
                               ? registers + static_cast<size_t>(op.out.index) * register_bytes
                               : written[static_cast<size_t>(op.out.index) * devices_ + d] +
                                     static_cast<size_t>(b) * op.out_size;
      if (op.kind == ElementwiseNote::Kind::kUnary) {
        kernels::cpu::unary_into(static_cast<kernels::UnaryOp>(op.op), op.dtype, operand(0, 0), out,
                                 n);
        continue;
      }
      if (op.kind == ElementwiseNote::Kind::kCast) {
        kernels::cpu::cast_into(op.dtype, op.out_dtype, operand(0, 0), out, n);
        continue;
      }
      const ElementwiseOperand* modes = &operands_[(o * devices_ + d) * 2];
      const bool a_repeats = modes[0].mode == ElementwiseOperand::Mode::kRepeat;
      const bool b_repeats = modes[1].mode == ElementwiseOperand::Mode::kRepeat;
      // A row operand restarts every period: one kernel run per row.
      int64_t run = n;
      for (int k = 0; k < 2; ++k) {
        if (modes[k].mode == ElementwiseOperand::Mode::kRows) run = std::min(run, modes[k].period);
      }
      for (int64_t r = 0; r < n; r += run) {
        kernels::cpu::binary_into(static_cast<kernels::BinaryOp>(op.op), op.dtype, operand(0, r),
                                  a_repeats, operand(1, r), b_repeats,
                                  out + static_cast<size_t>(r) * op.out_size, run);
      }
    }
  }
}

}  // namespace dtensor::capture
