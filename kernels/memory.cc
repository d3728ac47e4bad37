// The device switch of runtime/element_loops.h.
#include "runtime/element_loops.h"

#include "kernels/cpu/cpu_memory.h"
#include "kernels/dispatch.h"
#include "kernels/gpu/gpu_kernels.h"

namespace dtensor::kernels {

void copy_box_elements(const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                       const std::vector<int64_t>& dst_begin, const Shape& extent) {
  return dispatch::on(
      dispatch::device_type_of("copy_box", src, dst),
      [&] { return cpu::copy_box_elements(src, src_begin, dst, dst_begin, extent); },
      [&] {
        return gpu::kernel(&gpu::Table::copy_box_elements, "copy_box")(src, src_begin, dst,
                                                                       dst_begin, extent);
      });
}

void reduce_range_elements(Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin,
                           int64_t end) {
  return dispatch::on(
      dispatch::device_type_of("reduce_into", dst, src),
      [&] { return cpu::reduce_range_elements(dst, src, op, begin, end); },
      [&] {
        return gpu::kernel(&gpu::Table::reduce_range_elements, "reduce_into")(dst, src, op, begin,
                                                                              end);
      });
}

void reduce_tensors_into(Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op) {
  return dispatch::on(
      dispatch::device_type_of("reduce_tensors", acc, inputs),
      [&] { return cpu::reduce_tensors_into(acc, inputs, op); },
      [&] {
        return gpu::kernel(&gpu::Table::reduce_tensors_into, "reduce_tensors")(acc, inputs, op);
      });
}

void fill_value(Tensor& dst, double value) {
  return dispatch::on(
      dst.device().type, [&] { return cpu::fill_value(dst, value); },
      [&] { return gpu::kernel(&gpu::Table::fill_value, "fill")(dst, value); });
}

void fill_random(Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                 const RandomSpec& spec) {
  return dispatch::on(
      shard.device().type, [&] { return cpu::fill_random(shard, global_shape, offset, spec); },
      [&] {
        const char* op = spec.distribution == RandomDistribution::kUniform  ? "random_uniform"
                         : spec.distribution == RandomDistribution::kNormal ? "random_normal"
                                                                            : "truncated_normal";
        return gpu::kernel(&gpu::Table::fill_random, op)(shard, global_shape, offset, spec);
      });
}

Tensor host_readable(const Tensor& t) {
  if (t.memory_space() == MemorySpace::kHost) return t;
  return gpu::copy_to_host(t);
}

Tensor on_device(const Tensor& host, const Device& device) {
  if (host.memory_space() != MemorySpace::kHost) {
    throw_error<InternalError>("on_device", "{} is not in host memory", host.to_string());
  }
  if (memory_space_of(device.type) == MemorySpace::kHost) return host.with_device(device);
  return gpu::copy_to_gpu(host, device);
}

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key) {
  return cpu::philox4x32_10(counter, key);
}

}  // namespace dtensor::kernels
