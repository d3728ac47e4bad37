// The runtime's element loops: the one place where each is named and its signature written, in the
// columns of the kernel list (kernels/kernel_list.h: return type, name, parameters, arguments, the
// op as errors name it, the tensors whose device type picks the backend, the front's check).
// Generated from it: the front and CPU declarations (runtime/element_loops.h), the front's
// definitions (runtime/element_loops.cc) and the GPU entries (gpu::ElementLoopTable, the
// element-loop part of kernels/gpu/gpu_kernels.h's gpu::Table).
//
// The callers validate (runtime/block.h, runtime/random.h); errors name the caller's function.
//
// No include guard: included once per generated part. The includer defines DTENSOR_ELEMENT_LOOP
// and undefines it after.

// Copies the box `extent` at `src_begin` of `src` to `dst_begin` of `dst` (runtime/block.h
// copy_box).
DTENSOR_ELEMENT_LOOP(void, copy_box_elements,
                     (const Tensor& src, const std::vector<int64_t>& src_begin, Tensor& dst,
                      const std::vector<int64_t>& dst_begin, const Shape& extent),
                     (src, src_begin, dst, dst_begin, extent), "copy_box", (src, dst), )
// dst[i] = op(dst[i], src[i]) over elements [begin, end) (runtime/block.h reduce_range).
DTENSOR_ELEMENT_LOOP(void, reduce_range_elements,
                     (Tensor& dst, const Tensor& src, ReduceOp op, int64_t begin, int64_t end),
                     (dst, src, op, begin, end), "reduce_into", (dst, src), )
// acc = the pairwise reduction of `inputs` (runtime/block.h reduce_tensors), split over the
// thread pool when large; acc has the inputs' shape and dtype.
DTENSOR_ELEMENT_LOOP(void, reduce_tensors_into,
                     (Tensor& acc, const std::vector<Tensor>& inputs, ReduceOp op),
                     (acc, inputs, op), "reduce_tensors", (acc, inputs), )
// Every element of `dst` set to `value` converted to its dtype.
DTENSOR_ELEMENT_LOOP(void, fill_value, (Tensor& dst, double value), (dst, value), "fill", (dst), )
// The Philox values of `spec` at the global positions of `shard` (runtime/random.h
// fill_random_shard); errors name the distribution ("[random_uniform] ...").
DTENSOR_ELEMENT_LOOP(void, fill_random,
                     (Tensor& shard, const Shape& global_shape, const std::vector<int64_t>& offset,
                      const RandomSpec& spec),
                     (shard, global_shape, offset, spec), spec, (shard), )
