#include "train/capture/elementwise.h"

#include <numeric>

#include "kernels/cpu/binary.h"
#include "kernels/cpu/unary.h"

namespace dtensor::capture {
namespace {

DType result_dtype(const ElementwiseNote& note) {
  return note.kind == ElementwiseNote::Kind::kCast ? static_cast<DType>(note.op) : note.dtype;
}

// How an operand of shape `in` lines up with the output shape `out`; nullopt when neither a full,
// a repeated nor a row operand (a broadcast inside the dims, e.g. [n,1] against [n,m]).
std::optional<ElementwiseOperand> classify(const Shape& in, const Shape& out) {
  const int64_t e = num_elements(in), n = num_elements(out);
  if (e == n) return ElementwiseOperand{};
  if (e == 1) return ElementwiseOperand{ElementwiseOperand::Mode::kRepeat, 0};
  size_t lead = 0;
  while (lead < in.size() && in[lead] == 1) ++lead;
  const size_t rest = in.size() - lead;
  if (rest > out.size()) return std::nullopt;
  for (size_t j = 0; j < rest; ++j) {
    if (in[lead + j] != out[out.size() - rest + j]) return std::nullopt;
  }
  if (e > kMaxElementwisePeriod) return std::nullopt;
  return ElementwiseOperand{ElementwiseOperand::Mode::kRows, e};
}

bool supported(const ElementwiseNote& note) {
  switch (note.kind) {
    case ElementwiseNote::Kind::kUnary:
      return kernels::cpu::unary_into_supported(static_cast<kernels::UnaryOp>(note.op), note.dtype);
    case ElementwiseNote::Kind::kBinary:
      return kernels::cpu::binary_into_supported(static_cast<kernels::BinaryOp>(note.op),
                                                 note.dtype);
    case ElementwiseNote::Kind::kCast:
      return kernels::cpu::cast_into_supported(note.dtype, result_dtype(note));
  }
  return false;
}

}  // namespace

int64_t ElementwiseCall::period(size_t device) const {
  int64_t p = 1;
  for (int k = 0; k < arity; ++k) {
    const ElementwiseOperand& o =
        operands[device * static_cast<size_t>(arity) + static_cast<size_t>(k)];
    if (o.mode == ElementwiseOperand::Mode::kRows) p = std::lcm(p, o.period);
  }
  return p;
}

std::optional<ElementwiseCall> match_elementwise(const std::vector<ElementwiseNote>& notes,
                                                 const std::vector<const DTensor*>& inputs,
                                                 const DTensor& out) {
  if (notes.empty() || inputs.empty() || inputs.size() > 2) return std::nullopt;
  // One note per distinct output buffer and no others: a kernel that made temporaries through
  // these kernels (or another thread's work meanwhile) leaves the call an opaque closure.
  size_t distinct = 0;
  for (size_t d = 0; d < out.shards().size(); ++d) {
    bool seen = false;
    for (size_t e = 0; e < d && !seen; ++e) {
      seen = out.shard(d).raw_data() == out.shard(e).raw_data();
    }
    distinct += seen ? 0 : 1;
  }
  if (notes.size() != distinct) return std::nullopt;
  if (out.mesh().device_type() != DeviceType::kCPU) return std::nullopt;
  const size_t devices = out.shards().size();
  ElementwiseCall call{};
  call.arity = static_cast<int>(inputs.size());
  for (size_t d = 0; d < devices; ++d) {
    const Tensor& y = out.shard(d);
    const ElementwiseNote* found = nullptr;
    for (const ElementwiseNote& n : notes) {
      if (n.output == y.raw_data()) found = &n;
    }
    if (found == nullptr || !supported(*found) || result_dtype(*found) != y.dtype()) {
      return std::nullopt;
    }
    const int arity = found->kind == ElementwiseNote::Kind::kBinary ? 2 : 1;
    if (arity != call.arity) return std::nullopt;
    if (d == 0) {
      call.kind = found->kind;
      call.op = found->op;
      call.dtype = found->dtype;
      call.out_dtype = y.dtype();
    } else if (found->kind != call.kind || found->op != call.op || found->dtype != call.dtype) {
      return std::nullopt;
    }
    call.shapes.push_back(y.shape());
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor& x = inputs[k]->shard(d);
      if (x.raw_data() != found->inputs[k] || x.dtype() != found->dtype) return std::nullopt;
      std::optional<ElementwiseOperand> operand = classify(x.shape(), y.shape());
      if (!operand) return std::nullopt;
      call.operands.push_back(*operand);
    }
  }
  return call;
}

}  // namespace dtensor::capture
