// conv2d forward and forward+backward GFLOP/s for the CIFAR-10 tutorial's two convolutions
// (batch 128, SAME padding, stride 1: 24x24x3 -> 5x5x64 and 12x12x64 -> 5x5x64) through our op
// on batch=1 and batch=8 meshes (x batch-sharded, the filter replicated), next to oneDNN called
// directly in the same run (the same primitives with NHWC activations, the filter already in the
// primitive's layout, all cores). Backward is both gradients: input and filter.
#include <omp.h>

#include <dnnl.hpp>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"

namespace {

using namespace dtensor;

struct ConvShape {
  const char* name;
  int64_t n, h, w, c, k, o;
};

double conv_flops(const ConvShape& s) {
  return 2.0 * static_cast<double>(s.n * s.h * s.w * s.o) * static_cast<double>(s.k * s.k * s.c);
}

// Forward and forward+backward seconds of oneDNN's primitives called directly.
std::pair<double, double> onednn_direct(const ConvShape& s, int reps) {
  using dnnl::memory;
  using Tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  const memory::desc src({s.n, s.c, s.h, s.w}, f32, Tag::nhwc);
  const memory::desc dst({s.n, s.o, s.h, s.w}, f32, Tag::nhwc);
  const memory::desc any_w({s.o, s.c, s.k, s.k}, f32, Tag::any);
  const memory::dims strides = {1, 1}, pad = {s.k / 2, s.k / 2};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src, any_w, dst,
                                      strides, pad, pad),
      eng);
  dnnl::convolution_backward_data::primitive_desc bwd_data(
      dnnl::convolution_backward_data::desc(algo, src, any_w, dst, strides, pad, pad), eng, fwd);
  dnnl::convolution_backward_weights::primitive_desc bwd_weights(
      dnnl::convolution_backward_weights::desc(algo, src, any_w, dst, strides, pad, pad), eng, fwd);
  memory x(src, eng), y(dst, eng), dx(src, eng), dy(dst, eng);
  memory w(fwd.weights_desc(), eng), w_data(bwd_data.weights_desc(), eng),
      dw(bwd_weights.diff_weights_desc(), eng);
  for (memory* m : {&x, &y, &dx, &dy, &w, &w_data, &dw}) {
    std::fill_n(static_cast<float*>(m->get_data_handle()), m->get_desc().get_size() / 4, 0.01f);
  }
  dnnl::convolution_forward conv(fwd);
  dnnl::convolution_backward_data conv_data(bwd_data);
  dnnl::convolution_backward_weights conv_weights(bwd_weights);
  auto forward = [&] {
    conv.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
  };
  auto backward = [&] {
    conv_data.execute(
        stream, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w_data}, {DNNL_ARG_DIFF_SRC, dx}});
    conv_weights.execute(stream,
                         {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
  };
  const double t_fwd = bench::median_seconds([&] { forward(), stream.wait(); }, reps);
  const double t_all = bench::median_seconds([&] { forward(), backward(), stream.wait(); }, reps);
  return {t_fwd, t_all};
}

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("conv",
                            "conv2d forward and forward+backward GFLOP/s for the CIFAR-10 "
                            "tutorial's convolutions on 1 and 8 devices next to oneDNN called "
                            "directly. Prints one JSON object per measurement.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const int reps = 7;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const ConvShape& s :
       {ConvShape{"conv1", 128, 24, 24, 3, 5, 64}, ConvShape{"conv2", 128, 12, 12, 64, 5, 64}}) {
    const double flops = conv_flops(s);
    auto fields = [&](const char* path, const char* pass, int64_t devices) {
      return std::vector<bench::Field>{{"layer", std::string(s.name)},
                                       {"path", std::string(path)},
                                       {"pass", std::string(pass)},
                                       {"devices", devices}};
    };
    omp_set_num_threads(cores);
    const auto [t_fwd, t_all] = onednn_direct(s, reps);
    bench::report("conv", fields("onednn_direct", "forward", 1), flops / t_fwd / 1e9, "GFLOP/s");
    bench::report("conv", fields("onednn_direct", "forward_backward", 1), 3 * flops / t_all / 1e9,
                  "GFLOP/s");

    Conv2dOptions same;
    same.padding = {Padding2d::kSame};
    for (int64_t devices : {1, 8}) {
      const Mesh mesh = Mesh::create({{"batch", devices}}, DeviceType::kCPU);
      const DTensor x =
          random_uniform({s.n, s.h, s.w, s.c}, Layout::batch_sharded(mesh, "batch", 4), 1);
      const DTensor w = random_uniform({s.k, s.k, s.c, s.o}, Layout::replicated(mesh, 4), 2);
      const DTensor dy =
          random_uniform({s.n, s.h, s.w, s.o}, Layout::batch_sharded(mesh, "batch", 4), 3);
      const double fwd =
          bench::median_seconds([&] { bench::do_not_optimize(conv2d(x, w, same)); }, reps);
      const double all = bench::median_seconds(
          [&] {
            bench::do_not_optimize(conv2d(x, w, same));
            bench::do_not_optimize(conv2d_backprop_input(x.shape(), w, dy, same));
            bench::do_not_optimize(conv2d_backprop_filter(x, w.shape(), dy, same));
          },
          reps);
      bench::report("conv", fields("runtime", "forward", devices), flops / fwd / 1e9, "GFLOP/s");
      bench::report("conv", fields("runtime", "forward_backward", devices), 3 * flops / all / 1e9,
                    "GFLOP/s");
    }
  }
  // The tutorial's pooling and normalisation on conv1's output: forward and backward, ms per call.
  for (int64_t devices : {1, 8}) {
    const Mesh mesh = Mesh::create({{"batch", devices}}, DeviceType::kCPU);
    const Layout batch = Layout::batch_sharded(mesh, "batch", 4);
    const DTensor x = random_uniform({128, 24, 24, 64}, batch, 4);
    const Pool2dOptions pool{{3, 3}, {2, 2}, {Padding2d::kSame}};
    auto ms = [&](const char* op, const std::function<DTensor()>& f) {
      const double t = bench::median_seconds([&] { bench::do_not_optimize(f()); }, reps);
      bench::report("conv",
                    {{"layer", std::string(op)},
                     {"path", std::string("runtime")},
                     {"pass", std::string("forward_backward")},
                     {"devices", devices}},
                    t * 1e3, "ms");
    };
    auto with_gradient = [&](const std::function<DTensor(const DTensor&)>& op) {
      return [&x, op] {
        GradientTape tape;
        tape.watch(x);
        const DTensor y = op(x);
        return tape.gradient(reduce_sum(y), {x})[0];
      };
    };
    ms("max_pool2d", with_gradient([&](const DTensor& t) { return max_pool2d(t, pool); }));
    ms("local_response_normalization", with_gradient([](const DTensor& t) {
         return local_response_normalization(t, 4, 1.0, 0.001 / 9, 0.75);
       }));
  }
}
