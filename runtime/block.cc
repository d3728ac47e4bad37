#include "runtime/block.h"

#include "runtime/element_loops.h"

namespace dtensor {
namespace {

void check_box(const Tensor& t, const std::vector<int64_t>& begin, const Shape& extent,
               const char* which) {
  bool ok = begin.size() == static_cast<size_t>(t.rank()) && extent.size() == begin.size();
  for (size_t i = 0; ok && i < begin.size(); ++i) {
    int64_t end = 0;
    ok = begin[i] >= 0 && extent[i] >= 0 && checked_add(begin[i], extent[i], &end) &&
         end <= t.shape()[i];
  }
  if (!ok) {
    throw_error<ShapeError>("copy_box", "{} box at [{}] of extent {} does not fit {}", which,
                            fmt::join(begin, ","), shape_to_string(extent), t.to_string());
  }
}

}  // namespace

void copy_box(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
              const std::vector<int64_t>& dst_begin, const Shape& extent) {
  if (src.dtype() != dst.dtype()) {
    throw_error<DTypeError>("copy_box", "source {} and destination {} differ in dtype",
                            src.to_string(), dst.to_string());
  }
  check_box(src, src_begin, extent, "source");
  check_box(dst, dst_begin, extent, "destination");
  kernels::copy_box_elements(src, src_begin, dst, dst_begin, extent);
}

Tensor slice_box(const Tensor& src, const std::vector<int64_t>& begin, const Shape& extent) {
  if (src.is_shared_zeros()) {
    check_box(src, begin, extent, "source");
    return Tensor::shared_zeros(extent, src.dtype(), src.device());
  }
  Tensor out = Tensor::empty(extent, src.dtype(), src.device());
  copy_box(src, begin, out, std::vector<int64_t>(extent.size(), 0), extent);
  return out;
}

void reduce_range(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin, int64_t end) {
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape()) {
    throw_error<ShapeError>("reduce_into", "cannot reduce {} into {}", src.to_string(),
                            dst.to_string());
  }
  if (begin < 0 || end < begin || end > dst.num_elements()) {
    throw_error<ShapeError>("reduce_into", "element range [{}, {}) does not fit {}", begin, end,
                            dst.to_string());
  }
  kernels::reduce_range_elements(dst, src, op, begin, end);
}

Tensor reduce_tensors(const std::vector<Tensor>& inputs, ReduceOp op) {
  if (inputs.empty()) throw_error<InvalidArgumentError>("reduce_tensors", "no inputs");
  const Tensor& first = inputs[0];
  for (const Tensor& in : inputs) {
    if (in.dtype() != first.dtype() || in.shape() != first.shape()) {
      throw_error<ShapeError>("reduce_tensors", "cannot reduce {} with {}", in.to_string(),
                              first.to_string());
    }
  }
  if (op == ReduceOp::kSum) {
    // Shared zeros add nothing: the sum of the others (one of them itself, when only one is left).
    std::vector<Tensor> terms;
    for (const Tensor& in : inputs) {
      if (!in.is_shared_zeros()) terms.push_back(in);
    }
    if (terms.size() < inputs.size()) {
      if (terms.empty()) return first;
      return terms.size() == 1 ? terms[0] : reduce_tensors(terms, op);
    }
  }
  Tensor acc = Tensor::empty(first.shape(), first.dtype(), first.device());
  kernels::reduce_tensors_into(acc, inputs, op);
  return acc;
}

}  // namespace dtensor
