// f32 Tensors to and from their RPC form (ps.proto's TensorProto), and row slices of them.
// Functions of values; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"
#include "train/ps/ps.pb.h"

namespace dtensor::ps {

// DTypeError "[to_proto] ..." for a tensor that is not f32.
void to_proto(const Tensor& tensor, rpc::TensorProto* out);
// InvalidArgumentError "[from_proto] ..." when the bytes do not match the shape.
Tensor from_proto(const rpc::TensorProto& proto);
// Rows [offset, offset + rows) of dim 0, copied.
Tensor slice_rows(const Tensor& tensor, int64_t offset, int64_t rows);
// `parts` concatenated along dim 0 into a tensor of `shape`; ShapeError when they do not fill it.
Tensor concat_rows(const std::vector<Tensor>& parts, const Shape& shape);

}  // namespace dtensor::ps
