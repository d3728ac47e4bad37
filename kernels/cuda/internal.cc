#include "kernels/cuda/internal.h"

#include <fmt/format.h>

#include <algorithm>

#include "kernels/cuda/launch.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"
#include "runtime/error.h"

namespace dtensor::kernels::cuda_internal {

cudaStream_t stream_of(const Tensor& t, const char* op) { return cuda::activate(t.device(), op); }

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

namespace {
void check_rank(size_t rank, const char* op) {
  if (rank > static_cast<size_t>(cuda_launch::kMaxRank)) {
    throw_error<UnimplementedError>(op, "GPU kernels take tensors of rank <= {}, got rank {}",
                                    cuda_launch::kMaxRank, rank);
  }
}
}  // namespace

StridedIndex contiguous(const Shape& shape, const char* op) {
  check_rank(shape.size(), op);
  StridedIndex idx;
  idx.rank = static_cast<int>(shape.size());
  const std::vector<int64_t> s = strides_of(shape);
  for (size_t d = 0; d < shape.size(); ++d) {
    idx.dims[d] = shape[d];
    idx.strides[d] = s[d];
  }
  return idx;
}

StridedIndex broadcast(const Shape& in, const Shape& out, const char* op) {
  check_rank(out.size(), op);
  StridedIndex idx;
  idx.rank = static_cast<int>(out.size());
  const std::vector<int64_t> s = strides_of(in);
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < out.size(); ++d) {
    idx.dims[d] = out[d];
    idx.strides[d] = (d < lead || in[d - lead] == 1) ? 0 : s[d - lead];
  }
  return idx;
}

Tensor to_f32(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kF32, x.device());
  cuda_launch::cast(code(x.dtype()), code(DType::kF32), x.raw_data(), y.raw_data(),
                    x.num_elements(), stream_of(x, "cast"));
  return y;
}

Tensor to_bf16(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::kBF16, x.device());
  cuda_launch::cast(code(x.dtype()), code(DType::kBF16), x.raw_data(), y.raw_data(),
                    x.num_elements(), stream_of(x, "cast"));
  return y;
}

Tensor make_flag(const Tensor& on) {
  Tensor flag = Tensor::empty({1}, DType::kI64, on.device());
  // -1 is the largest value as the unsigned atomicMin of the kernels sees it: "no error".
  cuda_launch::fill(code(DType::kI64), flag.raw_data(), 1, -1.0, stream_of(on, "flag"));
  return flag;
}

int64_t read_flag(const int64_t* device_flag, const Tensor& on) {
  int64_t value = 0;
  cuda::copy_to_host(&value, device_flag, sizeof(value), on.device());
  return value;
}

}  // namespace dtensor::kernels::cuda_internal

namespace dtensor::kernels::cuda_launch {

void launch_failed(cudaError_t status, const char* kernel) {
  dtensor::cuda::throw_cuda_error(status, "kernel launch", kernel, nullptr);
}

}  // namespace dtensor::kernels::cuda_launch
