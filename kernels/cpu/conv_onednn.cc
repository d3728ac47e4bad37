// The f32 convolution kernels on oneDNN 2.6. Activations stay in the caller's NHWC buffers
// (oneDNN's jit kernels take NHWC; reordering activations would cost more than it saves); the
// filter, small, is reordered per call into the layout the primitive chose (format `any`) and,
// for the filter gradient, back to HWIO. A primitive per geometry is created once and cached;
// oneDNN primitives are immutable, so several threads may execute one at a time each with its
// own stream and scratchpad (user scratchpad mode: this oneDNN build's library scratchpad is not
// safe for concurrent execution).
#include "kernels/cpu/conv_onednn.h"

#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace dtensor::kernels::cpu::internal {
namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

enum class Direction { kForward, kBackwardData, kBackwardWeights };

dnnl::engine& cpu_engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// One direction of one geometry: the primitive and the filter reorders around it.
struct Entry {
  dnnl::primitive primitive;
  memory::desc user_weights, weights;  // HWIO as given, and as the primitive wants it
  memory::desc scratchpad;
  std::optional<dnnl::reorder> to_primitive, to_user;  // filter reorders, when layouts differ
};

using Key =
    std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
// The OpenMP threads a call runs with. oneDNN's jit kernels split their work for the thread count
// current when the primitive is created, so it is part of the key and set before creation too.
int threads_of(const Conv2dParams& p) { return p.threads > 0 ? p.threads : 1; }

Key key_of(Direction d, const ConvGeometry& g, const Conv2dParams& p) {
  return {static_cast<int>(d),
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
memory::desc hwio_desc(const ConvGeometry& g) {
  const int64_t opg = g.o / g.groups;
  if (g.groups == 1) {
    return memory::desc({g.o, g.cpg, g.kh, g.kw}, kF32,
                        Dims{1, g.o, g.kw * g.cpg * g.o, g.cpg * g.o});
  }
  return memory::desc({g.groups, opg, g.cpg, g.kh, g.kw}, kF32,
                      Dims{opg, 1, g.o, g.kw * g.cpg * g.o, g.cpg * g.o});
}
memory::desc any_weights(const ConvGeometry& g) {
  const int64_t opg = g.o / g.groups;
  if (g.groups == 1) return memory::desc({g.o, g.cpg, g.kh, g.kw}, kF32, Tag::any);
  return memory::desc({g.groups, opg, g.cpg, g.kh, g.kw}, kF32, Tag::any);
}

std::shared_ptr<Entry> create(Direction d, const ConvGeometry& g, const Conv2dParams& p) {
  dnnl::engine& eng = cpu_engine();
  const memory::desc src({g.n, g.c, g.h, g.w}, kF32, Tag::nhwc);
  const memory::desc dst({g.n, g.o, g.oh, g.ow}, kF32, Tag::nhwc);
  const Dims strides = {p.stride_h, p.stride_w};
  const Dims dilates = {p.dilation_h - 1, p.dilation_w - 1};
  const Dims pad_l = {p.pad_top, p.pad_left}, pad_r = {p.pad_bottom, p.pad_right};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto algo = dnnl::algorithm::convolution_direct;
  auto entry = std::make_shared<Entry>();
  entry->user_weights = hwio_desc(g);
  // Backward primitives take the forward one as a hint.
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src, any_weights(g),
                                      dst, strides, dilates, pad_l, pad_r),
      attr, eng);
  switch (d) {
    case Direction::kForward:
      entry->primitive = dnnl::convolution_forward(fwd);
      entry->weights = fwd.weights_desc();
      entry->scratchpad = fwd.scratchpad_desc();
      break;
    case Direction::kBackwardData: {
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, src, any_weights(g), dst, strides, dilates,
                                                pad_l, pad_r),
          attr, eng, fwd);
      entry->primitive = dnnl::convolution_backward_data(pd);
      entry->weights = pd.weights_desc();
      entry->scratchpad = pd.scratchpad_desc();
      break;
    }
    case Direction::kBackwardWeights: {
      dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, src, any_weights(g), dst, strides, dilates,
                                                   pad_l, pad_r),
          attr, eng, fwd);
      entry->primitive = dnnl::convolution_backward_weights(pd);
      entry->weights = pd.diff_weights_desc();
      entry->scratchpad = pd.scratchpad_desc();
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

// The cached entry for (d, g, p); null when oneDNN does not take the geometry.
std::shared_ptr<Entry> lookup(Direction d, const ConvGeometry& g, const Conv2dParams& p) {
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<Key, std::shared_ptr<Entry>>;
  const Key key = key_of(d, g, p);
  {
    std::lock_guard<std::mutex> lock(*mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  std::shared_ptr<Entry> entry;
  omp_set_num_threads(threads_of(p));
  try {
    entry = create(d, g, p);
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
void execute(const Entry& entry, int weights_arg, float* filter,
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
  const memory::desc md = output ? memory::desc({g.n, g.o, g.oh, g.ow}, kF32, Tag::nhwc)
                                 : memory::desc({g.n, g.c, g.h, g.w}, kF32, Tag::nhwc);
  return memory(md, cpu_engine(), const_cast<float*>(t.data<float>()));
}

bool takes(const ConvGeometry& g) { return g.cpg > 0 && g.o > 0 && g.n > 0; }

}  // namespace

bool onednn_conv2d(const Tensor& x, const Tensor& w, Tensor& y, const ConvGeometry& g,
                   const Conv2dParams& p) {
  if (!takes(g)) return false;
  std::shared_ptr<Entry> entry = lookup(Direction::kForward, g, p);
  if (!entry) return false;
  execute(*entry, DNNL_ARG_WEIGHTS, const_cast<float*>(w.data<float>()),
          {{DNNL_ARG_SRC, activation(g, false, x)}, {DNNL_ARG_DST, activation(g, true, y)}},
          threads_of(p));
  return true;
}

bool onednn_conv2d_backprop_input(const Tensor& w, const Tensor& dy, Tensor& dx,
                                  const ConvGeometry& g, const Conv2dParams& p) {
  if (!takes(g)) return false;
  std::shared_ptr<Entry> entry = lookup(Direction::kBackwardData, g, p);
  if (!entry) return false;
  execute(
      *entry, DNNL_ARG_WEIGHTS, const_cast<float*>(w.data<float>()),
      {{DNNL_ARG_DIFF_DST, activation(g, true, dy)}, {DNNL_ARG_DIFF_SRC, activation(g, false, dx)}},
      threads_of(p));
  return true;
}

bool onednn_conv2d_backprop_filter(const Tensor& x, const Tensor& dy, Tensor& dw,
                                   const ConvGeometry& g, const Conv2dParams& p) {
  if (!takes(g)) return false;
  std::shared_ptr<Entry> entry = lookup(Direction::kBackwardWeights, g, p);
  if (!entry) return false;
  execute(*entry, DNNL_ARG_DIFF_WEIGHTS, dw.data<float>(),
          {{DNNL_ARG_SRC, activation(g, false, x)}, {DNNL_ARG_DIFF_DST, activation(g, true, dy)}},
          threads_of(p));
  return true;
}

}  // namespace dtensor::kernels::cpu::internal
