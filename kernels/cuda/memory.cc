// The GPU half of runtime/element_loops.h (block copies and reductions, fills, Philox) and of
// kernels/optimizer_update.h (fused SGD, momentum, Adam/AdamW).
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cuda/internal.h"
#include "kernels/cuda/registration.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

// The distribution codes the Philox launcher takes (launch.h) are RandomDistribution's values.
static_assert(cuda_launch::random_kind::kUniform ==
              static_cast<int>(RandomDistribution::kUniform));
static_assert(cuda_launch::random_kind::kNormal == static_cast<int>(RandomDistribution::kNormal));
static_assert(cuda_launch::random_kind::kTruncatedNormal ==
              static_cast<int>(RandomDistribution::kTruncatedNormal));

namespace {

// `t` where a kernel on `device`'s physical GPU reads it: as it is on that GPU (logical devices of
// one GPU share its stream, so the kernel is ordered after t's writes), else a copy brought over
// first (cuda::to_device: a peer copy ordered by events), so no kernel is handed another GPU's
// pointer, whether or not the two GPUs can reach each other's memory.
Tensor on_gpu_of(const Tensor& t, const Device& device) {
  return cuda::physical_gpu_of(t.device()) == cuda::physical_gpu_of(device)
             ? t
             : cuda::to_device(t, device);
}

}  // namespace

void copy_box_elements(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                       const std::vector<int64_t>& dst_begin, const Shape& extent) {
  const char* op = "copy_box";
  const int64_t n = num_elements(extent);
  if (n == 0) return;
  StridedIndex from = contiguous(extent, op), to = contiguous(extent, op);
  const std::vector<int64_t> ss = strides_of(src.shape()), ds = strides_of(dst.shape());
  for (size_t d = 0; d < extent.size(); ++d) {
    from.strides[d] = ss[d];
    from.base += src_begin[d] * ss[d];
    to.strides[d] = ds[d];
    to.base += dst_begin[d] * ds[d];
  }
  const Tensor local = on_gpu_of(src, dst.device());
  cudaStream_t stream = stream_of(dst, op);
  cuda_launch::strided_copy(static_cast<int>(dtype_size(src.dtype())), local.raw_data(), from,
                            dst.raw_data(), to, n, stream);
}

void reduce_range_elements(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin,
                           int64_t end) {
  const size_t esize = dtype_size(dst.dtype());
  const Tensor local = on_gpu_of(src, dst.device());
  cuda_launch::combine_into(static_cast<int>(op), code(dst.dtype()),
                            static_cast<char*>(dst.raw_data()) + begin * esize,
                            static_cast<const char*>(local.raw_data()) + begin * esize, end - begin,
                            stream_of(dst, "reduce_into"));
}

void reduce_tensors_into(Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op) {
  const char* fn = "reduce_tensors";
  if (inputs.size() > static_cast<size_t>(cuda_launch::kMaxTreeInputs)) {
    throw_error<UnimplementedError>(fn, "the GPU reduces at most {} tensors at once, got {}",
                                    cuda_launch::kMaxTreeInputs, inputs.size());
  }
  std::vector<Tensor> local;
  std::vector<const void*> pointers;
  for (const Tensor& t : inputs) {
    local.push_back(on_gpu_of(t, acc.device()));
    pointers.push_back(local.back().raw_data());
  }
  cuda_launch::reduce_tree(static_cast<int>(op), code(acc.dtype()), acc.raw_data(), pointers.data(),
                           static_cast<int>(pointers.size()), acc.num_elements(),
                           stream_of(acc, fn));
}

void fill_value(Tensor& dst, double value) {
  cuda_launch::fill(code(dst.dtype()), dst.raw_data(), dst.num_elements(), value,
                    stream_of(dst, "fill"));
}

namespace {

// The CPU's parameter rules for uniform reals (runtime/cpu/random.cc): bounds rounded to the
// dtype, the result kept below hi.
float round_f32(double x) {
  if (!(std::abs(x) <= std::numeric_limits<float>::max())) {
    return x > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(x);
}

float next_below_bf16(float x) {
  BFloat16 v(x);
  if ((v.bits & 0x7fffu) == 0) {
    v.bits = 0x8001u;
  } else if (v.bits & 0x8000u) {
    ++v.bits;
  } else {
    --v.bits;
  }
  return static_cast<float>(v);
}

}  // namespace

void fill_random(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                 const RandomSpec& spec) {
  const bool uniform = spec.distribution == RandomDistribution::kUniform;
  const char* fn = uniform                                            ? "random_uniform"
                   : spec.distribution == RandomDistribution::kNormal ? "random_normal"
                                                                      : "truncated_normal";
  const DType dt = shard.dtype();
  if (dt == DType::kBool || (!uniform && is_integer(dt))) throw_unsupported(fn, shard);
  cuda_launch::RandomParams p{};
  p.kind = static_cast<int>(spec.distribution);
  p.key[0] = static_cast<uint32_t>(spec.seed);
  p.key[1] = static_cast<uint32_t>(spec.seed >> 32);
  const std::string_view name = dtype_name(dt);
  const double a = spec.a, b = spec.b;
  if (uniform && is_integer(dt)) {
    if (a != std::floor(a) || b != std::floor(b)) {
      throw_error<InvalidArgumentError>(
          fn, "minval and maxval must be integers for {}, got {} and {}", name, a, b);
    }
    const double lo_limit = dt == DType::kI32 ? -0x1p31 : -0x1p63;
    if (a < lo_limit || b > -lo_limit) {
      throw_error<InvalidArgumentError>(fn, "range [{}, {}) does not fit in {}", a, b, name);
    }
    p.ilo = static_cast<int64_t>(a);
    const uint64_t hi_bits =
        b == 0x1p63 ? uint64_t{1} << 63 : static_cast<uint64_t>(static_cast<int64_t>(b));
    p.irange = hi_bits - static_cast<uint64_t>(p.ilo);
  } else if (uniform) {
    if (dt == DType::kF64) {
      const double lo = a, hi = b, scale = hi - lo;
      if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(scale)) {
        throw_error<InvalidArgumentError>(fn, "range [{}, {}) is empty or overflows in {}", a, b,
                                          name);
      }
      p.p0 = lo;
      p.p1 = scale;
      p.p2 = std::nextafter(hi, -std::numeric_limits<double>::infinity());
    } else {
      float lo = round_f32(a), hi = round_f32(b);
      if (dt == DType::kBF16) {
        lo = static_cast<float>(BFloat16(lo));
        hi = static_cast<float>(BFloat16(hi));
      }
      const float scale = hi - lo;
      if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi) || !std::isfinite(scale)) {
        throw_error<InvalidArgumentError>(fn, "range [{}, {}) is empty or overflows in {}", a, b,
                                          name);
      }
      p.p0 = lo;
      p.p1 = scale;
      p.p2 = dt == DType::kBF16 ? next_below_bf16(hi)
                                : std::nextafter(hi, -std::numeric_limits<float>::infinity());
    }
  } else {
    const bool f64 = dt == DType::kF64;
    const double m = f64 ? a : static_cast<double>(round_f32(a));
    const double s = f64 ? b : static_cast<double>(round_f32(b));
    if (!std::isfinite(m) || !std::isfinite(s) || !(s > 0)) {
      throw_error<InvalidArgumentError>(fn, "mean {} and stddev {} are not representable in {}", a,
                                        b, f64 ? "f64" : "f32");
    }
    p.p0 = m;
    p.p1 = s;
  }
  // Element i of the shard is element global.offset(i) of the global tensor.
  StridedIndex global = contiguous(shard.shape(), fn);
  const std::vector<int64_t> gs = strides_of(global_shape);
  for (size_t d = 0; d < global_shape.size(); ++d) {
    global.strides[d] = gs[d];
    global.base += offset[d] * gs[d];
  }
  cuda_launch::fill_random(code(dt), shard.raw_data(), global, shard.num_elements(), p,
                           stream_of(shard, fn));
}

Tensor host_to_gpu(const Tensor& host, const Device& device) {
  return cuda::to_device(host, device);
}

Tensor gpu_to_host(const Tensor& tensor) { return cuda::to_host(tensor); }

void sgd_update(const Tensor& var, const Tensor& grad, Tensor& var_out, double lr) {
  cuda_launch::sgd(code(var.dtype()), var.raw_data(), grad.raw_data(), var_out.raw_data(),
                   var.num_elements(), lr, stream_of(var, "SGD"));
}

void sgd_momentum_update(const Tensor& var, const Tensor& grad, const Tensor& velocity,
                         Tensor& var_out, Tensor& velocity_out, double lr, double momentum,
                         bool nesterov) {
  cuda_launch::sgd_momentum(code(var.dtype()), var.raw_data(), grad.raw_data(), velocity.raw_data(),
                            var_out.raw_data(), velocity_out.raw_data(), var.num_elements(), lr,
                            momentum, nesterov, stream_of(var, "SGD"));
}

void adam_update(const Tensor& var, const Tensor& grad, const Tensor& m, const Tensor& v,
                 Tensor& var_out, Tensor& m_out, Tensor& v_out, const AdamStepParams& params) {
  cuda_launch::adam(code(var.dtype()), var.raw_data(), grad.raw_data(), m.raw_data(), v.raw_data(),
                    var_out.raw_data(), m_out.raw_data(), v_out.raw_data(), var.num_elements(),
                    params.beta1, params.beta2, params.lr_t, params.epsilon, params.decay,
                    stream_of(var, "Adam"));
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_memory_kernels(Table& table) {
  table.copy_box_elements = copy_box_elements;
  table.reduce_range_elements = reduce_range_elements;
  table.reduce_tensors_into = reduce_tensors_into;
  table.fill_value = fill_value;
  table.fill_random = fill_random;
  table.copy_to_gpu = host_to_gpu;
  table.copy_to_host = gpu_to_host;
  table.sgd_update = sgd_update;
  table.sgd_momentum_update = sgd_momentum_update;
  table.adam_update = adam_update;
}

}  // namespace dtensor::kernels::gpu
