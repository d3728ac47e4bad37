#include "train/ps/tensor_proto.h"

#include <cstring>

#include "runtime/error.h"

namespace dtensor::ps {
namespace {

size_t row_bytes(const Tensor& t) {
  return t.rank() == 0 || t.dim(0) == 0 ? 0 : t.nbytes() / static_cast<size_t>(t.dim(0));
}

}  // namespace

void to_proto(const Tensor& tensor, rpc::TensorProto* out) {
  if (tensor.dtype() != DType::kF32) {
    throw_error<DTypeError>("to_proto", "only f32 tensors travel, not {} of shape {}",
                            dtype_name(tensor.dtype()), shape_to_string(tensor.shape()));
  }
  out->clear_shape();
  for (int64_t d : tensor.shape()) out->add_shape(d);
  out->set_data(tensor.raw_data(), tensor.nbytes());
}

Tensor from_proto(const rpc::TensorProto& proto) {
  Shape shape(proto.shape().begin(), proto.shape().end());
  for (int64_t d : shape) {
    if (d < 0)
      throw_error<InvalidArgumentError>("from_proto", "negative dim in shape {}",
                                        shape_to_string(shape));
  }
  Tensor out = Tensor::empty(shape, DType::kF32);
  if (proto.data().size() != out.nbytes()) {
    throw_error<InvalidArgumentError>("from_proto", "{} bytes for an f32 tensor of shape {} ({})",
                                      proto.data().size(), shape_to_string(shape), out.nbytes());
  }
  if (out.nbytes() > 0) std::memcpy(out.raw_data(), proto.data().data(), out.nbytes());
  return out;
}

Tensor slice_rows(const Tensor& tensor, int64_t offset, int64_t rows) {
  if (tensor.rank() == 0) return tensor.clone();
  Shape shape = tensor.shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, tensor.dtype());
  if (out.nbytes() > 0) {
    std::memcpy(out.raw_data(),
                static_cast<const char*>(tensor.raw_data()) + offset * row_bytes(tensor),
                out.nbytes());
  }
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts, const Shape& shape) {
  Tensor out = Tensor::empty(shape, DType::kF32);
  size_t at = 0;
  for (const Tensor& p : parts) {
    if (at + p.nbytes() > out.nbytes()) break;
    if (p.nbytes() > 0)
      std::memcpy(static_cast<char*>(out.raw_data()) + at, p.raw_data(), p.nbytes());
    at += p.nbytes();
  }
  if (at != out.nbytes()) {
    throw_error<ShapeError>("concat_rows", "{} parts of {} bytes do not fill shape {} ({} bytes)",
                            parts.size(), at, shape_to_string(shape), out.nbytes());
  }
  return out;
}

}  // namespace dtensor::ps
