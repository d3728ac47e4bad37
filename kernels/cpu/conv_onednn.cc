// The convolution kernels on oneDNN 2.6. Activations stay in the caller's NHWC buffers
// (oneDNN's jit kernels take NHWC; reordering activations would cost more than it saves); the
// filter, small, is reordered per call into the layout the primitive chose (format `any`) and,
// for the filter gradient, back to HWIO. A primitive per geometry and dtypes is created once and
// cached; oneDNN primitives are immutable, so several threads may execute one at a time each with
// its own stream and scratchpad (user scratchpad mode: this oneDNN build's library scratchpad is
// not safe for concurrent execution). bf16 takes only optimised kernels: oneDNN's reference
// convolution is slower than widening to f32, so a bf16 case it would run is refused.
#include "kernels/cpu/conv_onednn.h"

#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace dtensor::kernels::cpu::internal {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
using DataType = memory::data_type;
using Direction = ConvPass;

DataType data_type(DType t) { return t == DType::kBF16 ? DataType::bf16 : DataType::f32; }

dnnl::engine& cpu_engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// One direction of one geometry: the primitive and the filter reorders around it.
struct Entry {
  std::string implementation;
  dnnl::primitive primitive;
  memory::desc user_weights, weights;  // HWIO as given, and as the primitive wants it
  memory::desc scratchpad;
  std::optional<dnnl::reorder> to_primitive, to_user;  // filter reorders, when layouts differ
};

using Key = std::tuple<int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t>;
// The OpenMP threads a call runs with. oneDNN's jit kernels split their work for the thread count
// current when the primitive is created, so it is part of the key and set before creation too.
int threads_of(const Conv2dParams& p) { return p.threads > 0 ? p.threads : 1; }

// The dtypes of one pass (its two operands' and its result's) and the forward pass's epilogue.
struct DataTypes {
  DataType operands, out;
  bool bias = false, relu = false;
};

Key key_of(Direction d, DataTypes t, const ConvGeometry& g, const Conv2dParams& p) {
  return {static_cast<int>(d),
          static_cast<int>(t.operands),
          static_cast<int>(t.out),
          (t.bias ? 1 : 0) + (t.relu ? 2 : 0),
          threads_of(p),
          g.n,
          g.h,
          g.w,
          g.c,
          g.kh,
          g.kw,
          g.o,
          g.groups,
          p.stride_h,
          p.stride_w,
          p.dilation_h,
          p.dilation_w,
          p.pad_top,
          p.pad_bottom,
          p.pad_left,
          p.pad_right};
}

// The filter [kh, kw, cpg, o] as oneDNN's logical weights: {o, c, kh, kw}, or with groups
// {g, o/g, c/g, kh, kw}, described by strides over the HWIO buffer.
memory::desc hwio_desc(const ConvGeometry& g, DataType t) {
  const int64_t opg = g.o / g.groups;
  if (g.groups == 1) {
    return memory::desc({g.o, g.cpg, g.kh, g.kw}, t, Dims{1, g.o, g.kw * g.cpg * g.o, g.cpg * g.o});
  }
  return memory::desc({g.groups, opg, g.cpg, g.kh, g.kw}, t,
                      Dims{opg, 1, g.o, g.kw * g.cpg * g.o, g.cpg * g.o});
}
memory::desc any_weights(const ConvGeometry& g, DataType t) {
  const int64_t opg = g.o / g.groups;
  if (g.groups == 1) return memory::desc({g.o, g.cpg, g.kh, g.kw}, t, Tag::any);
  return memory::desc({g.groups, opg, g.cpg, g.kh, g.kw}, t, Tag::any);
}
// An activation: x (input side) or y (output side) of the convolution, NHWC.
memory::desc activation_desc(const ConvGeometry& g, bool output, DataType t) {
  return output ? memory::desc({g.n, g.o, g.oh, g.ow}, t, Tag::nhwc)
                : memory::desc({g.n, g.c, g.h, g.w}, t, Tag::nhwc);
}

// Fills the entry's primitive, weights and scratchpad from pd, refusing a reference kernel for
// bf16 (throws dnnl::error like an unsupported case).
template <typename Pd, typename Primitive>
void take(Entry& entry, const Pd& pd, const memory::desc& weights, DataTypes t) {
  entry.implementation = pd.impl_info_str();
  if (t.operands == DataType::bf16 && entry.implementation.rfind("ref", 0) == 0) {
    throw dnnl::error(dnnl_unimplemented, "reference bf16 convolution");
  }
  entry.primitive = Primitive(pd);
  entry.weights = weights;
  entry.scratchpad = pd.scratchpad_desc();
}

std::shared_ptr<Entry> create(Direction d, DataTypes t, const ConvGeometry& g,
                              const Conv2dParams& p) {
  dnnl::engine& eng = cpu_engine();
  const memory::desc src = activation_desc(g, false, t.operands);
  const memory::desc dst = activation_desc(g, true, t.operands);
  const Dims strides = {p.stride_h, p.stride_w};
  const Dims dilates = {p.dilation_h - 1, p.dilation_w - 1};
  const Dims pad_l = {p.pad_top, p.pad_left}, pad_r = {p.pad_bottom, p.pad_right};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // The forward pass's own attributes: the ReLU as a post-op (the bias is the primitive's own).
  dnnl::primitive_attr forward_attr = attr;
  if (t.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    forward_attr.set_post_ops(ops);
  }
  const auto algo = dnnl::algorithm::convolution_direct;
  auto entry = std::make_shared<Entry>();
  // The filter as the caller holds it: the operand's dtype, the result's for the filter gradient.
  entry->user_weights = hwio_desc(g, d == Direction::kBackwardWeights ? t.out : t.operands);
  auto forward = [&](const memory::desc& y) {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src,
                                        any_weights(g, t.operands), y, strides, dilates, pad_l,
                                        pad_r),
        attr, eng);
  };
  switch (d) {
    case Direction::kForward: {
      const memory::desc y = activation_desc(g, true, t.out);
      const auto pd =
          t.bias ? dnnl::convolution_forward::primitive_desc(
                       dnnl::convolution_forward::desc(
                           dnnl::prop_kind::forward_training, algo, src, any_weights(g, t.operands),
                           memory::desc({g.o}, t.out, Tag::a), y, strides, dilates, pad_l, pad_r),
                       forward_attr, eng)
                 : dnnl::convolution_forward::primitive_desc(
                       dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src,
                                                       any_weights(g, t.operands), y, strides,
                                                       dilates, pad_l, pad_r),
                       forward_attr, eng);
      take<decltype(pd), dnnl::convolution_forward>(*entry, pd, pd.weights_desc(), t);
      break;
    }
    case Direction::kBackwardData: {
      // Backward primitives take the forward one (operands' dtype throughout) as a hint.
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, activation_desc(g, false, t.out),
                                                any_weights(g, t.operands), dst, strides, dilates,
                                                pad_l, pad_r),
          attr, eng, forward(dst));
      take<decltype(pd), dnnl::convolution_backward_data>(*entry, pd, pd.weights_desc(), t);
      break;
    }
    case Direction::kBackwardWeights: {
      dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, src, any_weights(g, t.out), dst, strides,
                                                   dilates, pad_l, pad_r),
          attr, eng, forward(dst));
      take<decltype(pd), dnnl::convolution_backward_weights>(*entry, pd, pd.diff_weights_desc(), t);
      break;
    }
  }
  if (entry->weights != entry->user_weights) {
    if (d == Direction::kBackwardWeights) {
      entry->to_user = dnnl::reorder(
          dnnl::reorder::primitive_desc(eng, entry->weights, eng, entry->user_weights));
    } else {
      entry->to_primitive = dnnl::reorder(
          dnnl::reorder::primitive_desc(eng, entry->user_weights, eng, entry->weights));
    }
  }
  return entry;
}

// The cached entry for (d, t, g, p); null when oneDNN does not take the case.
std::shared_ptr<Entry> lookup(Direction d, DataTypes t, const ConvGeometry& g,
                              const Conv2dParams& p) {
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<Key, std::shared_ptr<Entry>>;
  const Key key = key_of(d, t, g, p);
  {
    std::lock_guard<std::mutex> lock(*mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  std::shared_ptr<Entry> entry;
  omp_set_num_threads(threads_of(p));
  try {
    entry = create(d, t, g, p);
  } catch (const dnnl::error&) {
    entry = nullptr;  // unsupported: the direct loop runs instead
  }
  std::lock_guard<std::mutex> lock(*mu);
  return cache->emplace(key, entry).first->second;
}

// Per-thread buffers that only grow: the scratchpad and the reordered filter.
float* thread_buffer(int which, size_t bytes) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[which];
  if (b.size() * sizeof(float) < bytes) b.resize((bytes + sizeof(float) - 1) / sizeof(float));
  return b.data();
}

// Runs `entry` with the filter argument `weights_arg` bound to `filter` (HWIO, reordered on the
// way in or out as the entry says) and the activations in `args`.
void execute(const Entry& entry, int weights_arg, void* filter,
             std::unordered_map<int, memory> args, int threads) {
  omp_set_num_threads(threads);
  dnnl::engine& eng = cpu_engine();
  dnnl::stream stream(eng);
  memory user(entry.user_weights, eng, filter);
  memory weights = user;
  if (entry.to_primitive || entry.to_user) {
    weights = memory(entry.weights, eng, thread_buffer(0, entry.weights.get_size()));
  }
  if (entry.to_primitive) entry.to_primitive->execute(stream, user, weights);
  args.emplace(weights_arg, weights);
  args.emplace(DNNL_ARG_SCRATCHPAD,
               memory(entry.scratchpad, eng, thread_buffer(1, entry.scratchpad.get_size())));
  entry.primitive.execute(stream, args);
  if (entry.to_user) entry.to_user->execute(stream, weights, user);
  stream.wait();
}

memory activation(const ConvGeometry& g, bool output, const Tensor& t) {
  return memory(activation_desc(g, output, data_type(t.dtype())), cpu_engine(),
                const_cast<void*>(t.raw_data()));
}

// oneDNN's jit kernels keep the geometry in 32-bit ints: paddings, strides and dilations near
// 2^62 (valid here, conv_params.h) would overflow inside them, so those run on the direct loops.
bool takes(const ConvGeometry& g, const Conv2dParams& p) {
  constexpr int64_t kLimit = int64_t{1} << 24;
  for (int64_t v : {g.h, g.w, g.oh, g.ow, g.kh, g.kw, p.stride_h, p.stride_w, p.dilation_h,
                    p.dilation_w, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right}) {
    if (v >= kLimit) return false;
  }
  return g.cpg > 0 && g.o > 0 && g.n > 0;
}

}  // namespace

bool onednn_conv(ConvPass pass, const Tensor& a, const Tensor& b, Tensor& out,
                 const ConvGeometry& g, const Conv2dParams& p, const ConvEpilogue& epilogue) {
  if (!takes(g, p)) return false;
  const DataTypes t{data_type(a.dtype()), data_type(out.dtype()), epilogue.bias != nullptr,
                    epilogue.relu};
  std::shared_ptr<Entry> entry = lookup(pass, t, g, p);
  if (!entry) return false;
  // The filter operand (the result, for the filter gradient) and the activations.
  switch (pass) {
    case ConvPass::kForward: {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, activation(g, false, a)},
                                              {DNNL_ARG_DST, activation(g, true, out)}};
      if (epilogue.bias) {
        args.emplace(DNNL_ARG_BIAS, memory(memory::desc({g.o}, t.out, Tag::a), cpu_engine(),
                                           const_cast<void*>(epilogue.bias->raw_data())));
      }
      execute(*entry, DNNL_ARG_WEIGHTS, const_cast<void*>(b.raw_data()), std::move(args),
              threads_of(p));
      break;
    }
    case ConvPass::kBackwardData:
      execute(*entry, DNNL_ARG_WEIGHTS, const_cast<void*>(a.raw_data()),
              {{DNNL_ARG_DIFF_DST, activation(g, true, b)},
               {DNNL_ARG_DIFF_SRC, activation(g, false, out)}},
              threads_of(p));
      break;
    case ConvPass::kBackwardWeights:
      execute(
          *entry, DNNL_ARG_DIFF_WEIGHTS, out.raw_data(),
          {{DNNL_ARG_SRC, activation(g, false, a)}, {DNNL_ARG_DIFF_DST, activation(g, true, b)}},
          threads_of(p));
      break;
  }
  return true;
}

std::string onednn_conv_implementation(ConvPass pass, DType operands, DType out,
                                       const ConvGeometry& g, const Conv2dParams& p) {
  if (!takes(g, p)) return "";
  std::shared_ptr<Entry> entry = lookup(pass, {data_type(operands), data_type(out)}, g, p);
  return entry ? entry->implementation : "";
}

}  // namespace dtensor::kernels::cpu::internal
