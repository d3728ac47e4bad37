// GPU convolution throughput on the CIFAR-10 tower's two layers (5x5 SAME, batch 128, 24x24x3 ->
// 64 and 12x12x64 -> 64) and the Fashion-MNIST CNN's first (28x28x1 -> 64): one forward and both
// backward passes through our kernels::conv2d* (the front, the HWIO <-> KRSC transposes, cuDNN)
// next to cuDNN called directly on KRSC buffers with the algorithm cudnnFind* measures fastest
// (any algorithm; the same math: FMA for f32, tensor cores for bf16). Rounds of both are
// interleaved; each round is `reps` fwd+bwd triples and one stream synchronize; medians.
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "kernels/kernels.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"

namespace {

using namespace dtensor;

struct Layer {
  const char* name;
  int n, h, w, c, k, o;  // x [n,h,w,c], w [k,k,c,o], SAME, stride 1
};

Tensor random_tensor(const Shape& shape, DType dtype, const Device& gpu, uint32_t seed) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  uint32_t s = seed;
  for (int64_t i = 0; i < host.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    host.data<float>()[i] = static_cast<float>(s >> 8) * 0x1p-24f - 0.5f;
  }
  return kernels::cast(cuda::to_device(host, gpu), dtype);
}

void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "gpu_conv: %s failed: %s\n", call, cudnnGetErrorString(status));
    std::exit(1);
  }
}

// The fastest algorithm cudnnFind* measured (its results come sorted by time, failures last).
template <typename Perf>
auto fastest(const Perf* perf, int count, const char* pass) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i].algo;
  }
  std::fprintf(stderr, "gpu_conv: no %s algorithm ran\n", pass);
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// cuDNN called directly: descriptors, the fastest algorithm of each pass (cudnnFind*), and one
// fwd + bwd-data + bwd-filter triple on given buffers.
class DirectConv {
 public:
  DirectConv(cudnnHandle_t h, const Layer& l, DType dtype) : h_(h) {
    const cudnnDataType_t type = dtype == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    check(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&y_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateFilterDescriptor(&w_), "cudnnCreateFilterDescriptor");
    check(cudnnCreateConvolutionDescriptor(&conv_), "cudnnCreateConvolutionDescriptor");
    check(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, type, l.n, l.c, l.h, l.w), "x");
    check(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NHWC, type, l.n, l.o, l.h, l.w), "y");
    check(cudnnSetFilter4dDescriptor(w_, type, CUDNN_TENSOR_NHWC, l.o, l.c, l.k, l.k), "w");
    check(cudnnSetConvolution2dDescriptor(conv_, l.k / 2, l.k / 2, 1, 1, 1, 1,
                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
          "conv");
    check(cudnnSetConvolutionMathType(
              conv_, dtype == DType::kBF16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
          "math");
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    check(cudnnFindConvolutionForwardAlgorithm(h, x_, w_, conv_, y_,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd),
          "cudnnFindConvolutionForwardAlgorithm");
    fwd_ = fastest(fwd, count, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    check(cudnnFindConvolutionBackwardDataAlgorithm(
              h, w_, y_, conv_, x_, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, data),
          "cudnnFindConvolutionBackwardDataAlgorithm");
    data_ = fastest(data, count, "backward data");
    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    check(cudnnFindConvolutionBackwardFilterAlgorithm(
              h, x_, y_, conv_, w_, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, filter),
          "cudnnFindConvolutionBackwardFilterAlgorithm");
    filter_ = fastest(filter, count, "backward filter");
    size_t a = 0, b = 0, c = 0;
    check(cudnnGetConvolutionForwardWorkspaceSize(h, x_, w_, conv_, y_, fwd_, &a), "ws");
    check(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w_, y_, conv_, x_, data_, &b), "ws");
    check(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x_, y_, conv_, w_, filter_, &c),
          "ws");
    workspace_bytes_ = std::max({a, b, c, size_t{8}});
  }
  DirectConv(const DirectConv&) = delete;
  DirectConv& operator=(const DirectConv&) = delete;
  ~DirectConv() {
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyConvolutionDescriptor(conv_);
  }
  size_t workspace_bytes() const { return workspace_bytes_; }
  void run(const void* x, const void* w, const void* dy, void* y, void* dx, void* dw,
           void* ws) const {
    const float one = 1.0f, zero = 0.0f;
    check(cudnnConvolutionForward(h_, &one, x_, x, w_, w, conv_, fwd_, ws, workspace_bytes_,
                                  &zero, y_, y),
          "cudnnConvolutionForward");
    check(cudnnConvolutionBackwardData(h_, &one, w_, w, y_, dy, conv_, data_, ws,
                                       workspace_bytes_, &zero, x_, dx),
          "cudnnConvolutionBackwardData");
    check(cudnnConvolutionBackwardFilter(h_, &one, x_, x, y_, dy, conv_, filter_, ws,
                                         workspace_bytes_, &zero, w_, dw),
          "cudnnConvolutionBackwardFilter");
  }

 private:
  cudnnHandle_t h_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_{};
  cudnnConvolutionBwdDataAlgo_t data_{};
  cudnnConvolutionBwdFilterAlgo_t filter_{};
  size_t workspace_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t reps = 10, rounds = 15;
  cli::Flags flags("gpu_conv", "GPU conv2d fwd+bwd: ours next to cuDNN called directly.");
  flags.add_int("--reps", &reps, "fwd+bwd triples per timed round", 1);
  flags.add_int("--rounds", &rounds, "interleaved rounds per side (median)", 1);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  if (cuda::physical_gpu_count() == 0) {
    std::fprintf(stderr, "gpu_conv: no GPU visible (%s)\n", cuda::no_gpu_reason().c_str());
    return 1;
  }
  const Device gpu{DeviceType::kGPU, 0};
  cudaStream_t stream = cuda::activate(gpu, "gpu_conv");
  cudnnHandle_t handle;
  check(cudnnCreate(&handle), "cudnnCreate");
  check(cudnnSetStream(handle, stream), "cudnnSetStream");
  const Layer layers[] = {{"cifar10_conv1", 128, 24, 24, 3, 5, 64},
                          {"cifar10_conv2", 128, 12, 12, 64, 5, 64},
                          {"fashion_mnist_conv1", 128, 28, 28, 1, 5, 64}};
  for (const Layer& l : layers) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const char* dname = dtype == DType::kBF16 ? "bf16" : "f32";
      kernels::Conv2dParams p;
      p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = l.k / 2;
      const Shape xs{l.n, l.h, l.w, l.c}, ws{l.k, l.k, l.c, l.o}, ys{l.n, l.h, l.w, l.o};
      Tensor x = random_tensor(xs, dtype, gpu, 1), w = random_tensor(ws, dtype, gpu, 2),
             dy = random_tensor(ys, dtype, gpu, 3);
      Tensor y = Tensor::empty(ys, dtype, gpu), dx = Tensor::empty(xs, dtype, gpu),
             dw = Tensor::empty({l.o, l.k, l.k, l.c}, dtype, gpu);
      const DirectConv direct(handle, l, dtype);
      Tensor workspace = Tensor::empty(
          {static_cast<int64_t>((direct.workspace_bytes() + 7) / 8)}, DType::kI64, gpu);
      auto ours = [&] {
        bench::do_not_optimize(kernels::conv2d(x, w, p));
        bench::do_not_optimize(kernels::conv2d_backprop_input(xs, w, dy, p));
        bench::do_not_optimize(kernels::conv2d_backprop_filter(x, ws, dy, p));
      };
      auto theirs = [&] {
        direct.run(x.raw_data(), w.raw_data(), dy.raw_data(), y.raw_data(), dx.raw_data(),
                   dw.raw_data(), workspace.raw_data());
      };
      auto timed = [&](const auto& body) {
        const auto start = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < reps; ++i) body();
        cuda::synchronize(gpu);
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      };
      timed(ours);  // warm-up: algorithm choice, pools, cuDNN's lazy loading
      timed(theirs);
      std::vector<double> t_ours, t_direct;
      for (int64_t r = 0; r < rounds; ++r) {
        t_ours.push_back(timed(ours));
        t_direct.push_back(timed(theirs));
      }
      const double flop = 3 * 2.0 * l.n * l.h * l.w * static_cast<double>(l.o) * l.k * l.k * l.c;
      const double ours_tflops = flop * static_cast<double>(reps) / median(t_ours) / 1e12;
      const double direct_tflops = flop * static_cast<double>(reps) / median(t_direct) / 1e12;
      const std::vector<bench::Field> base = {{"layer", l.name}, {"dtype", dname}};
      auto with = [&](const char* impl) {
        std::vector<bench::Field> f = {{"impl", impl}};
        f.insert(f.end(), base.begin(), base.end());
        return f;
      };
      bench::report("gpu_conv", with("dtensor"), ours_tflops, "TFLOP/s");
      bench::report("gpu_conv", with("cudnn_direct_best"), direct_tflops, "TFLOP/s");
      bench::report("gpu_conv", with("ratio"), ours_tflops / direct_tflops, "x");
    }
  }
  cudnnDestroy(handle);
}
