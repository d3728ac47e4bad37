// conv2d and its two gradients on the GPU. f32 and bf16 (f32 accumulation, tensor cores) run on
// cuDNN 9's convolution API with NHWC activations; f64, and any geometry cuDNN refuses (a status
// of its NOT_SUPPORTED or BAD_PARAM categories, said once on stderr) or whose extents do not fit
// its int arguments, run on the direct kernels of cnn_launch.h (bf16 through f32 there, as the
// CPU). Shapes and dtypes are checked by the front (checks::conv2d and the
// gradients' checks).
//
// cuDNN takes symmetric padding and KRSC ([o, kh, kw, cpg]) filters: the part of an asymmetric
// padding beyond the smaller side is added to x explicitly (the pad kernel) and taken off dx
// (slice), and the HWIO filters are transposed on the device. f32 uses FMA math only, so results
// match the CPU's to f32 rounding, unless TF32 is allowed (tf32.h). Algorithms are the fastest
// that cudnnFind* measures (the cudnnGet*_v7 heuristics if it fails), restricted to deterministic
// GEMM-like ones (FFT and Winograd round differently); they are chosen once per geometry and
// cached with the descriptors. A measurement may pick another allowed algorithm in another run
// (timing noise), so bits may differ between runs, each within the f32 tolerance of the CPU. Workspaces come from the GPU allocator (stream-ordered on the
// device's stream). One cudnnHandle per physical GPU, bound to its stream, used under a mutex.
#include <cudnn.h>

#include <array>
#include <atomic>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cuda/cnn_launch.h"
#include "kernels/cuda/internal.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/registration.h"
#include "kernels/cuda/tf32.h"
#include "kernels/gpu/gpu_kernels.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"

namespace dtensor::kernels::gpu {

using namespace cuda_internal;

namespace {

// The most workspace one convolution may take: an algorithm that wants more is passed over.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

enum class Pass : int { kForward, kBackpropInput, kBackpropFilter };

// What check_cudnn throws when cuDNN does not take a convolution (a status of the NOT_SUPPORTED or
// BAD_PARAM categories): convolve() catches it and runs the direct kernels instead.
struct CudnnRefused {
  const char* call;
  cudnnStatus_t status;
};

void check_cudnn(cudnnStatus_t status, const char* call, const char* op) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const int category = CUDNN_STATUS_CATEGORY(status);
  if (category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM) {
    throw CudnnRefused{call, status};
  }
  throw_error<cuda::CudaError>(op, "{} failed: {}", call, cudnnGetErrorString(status));
}

// One handle per physical GPU, bound to its stream once and never destroyed, with the mutex that
// serializes its use (logical devices of one GPU may run their kernels on several threads).
struct CudnnGpu {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;
};
CudnnGpu& cudnn_for(const Tensor& on, const char* op) {
  static std::mutex mu;
  static auto* gpus = new std::vector<std::unique_ptr<CudnnGpu>>;
  cudaStream_t stream = stream_of(on, op);
  const size_t gpu = static_cast<size_t>(cuda::physical_gpu_of(on.device()));
  std::lock_guard<std::mutex> lock(mu);
  if (gpus->size() <= gpu) gpus->resize(gpu + 1);
  std::unique_ptr<CudnnGpu>& g = (*gpus)[gpu];
  if (g == nullptr) {
    auto created = std::make_unique<CudnnGpu>();
    check_cudnn(cudnnCreate(&created->handle), "cudnnCreate", op);
    check_cudnn(cudnnSetStream(created->handle, stream), "cudnnSetStream", op);
    g = std::move(created);
  }
  return *g;
}

cuda_launch::ConvDims dims_of(const ConvGeometry& g, const Conv2dParams& p) {
  return {g.n,        g.h,        g.w,          g.c,          g.kh,       g.kw,
          g.cpg,      g.o,        g.oh,         g.ow,         g.groups,   p.stride_h,
          p.stride_w, p.dilation_h, p.dilation_w, p.pad_top, p.pad_left};
}

Tensor f32_of(const Tensor& t) { return t.dtype() == DType::kBF16 ? to_f32(t) : t; }

// The direct kernels: out (of `out_shape`) from a and b, in f32 for bf16.
Tensor run_direct(Pass pass, const ConvGeometry& g, const Conv2dParams& p, const Tensor& a_in,
                  const Tensor& b_in, const Shape& out_shape, const char* op) {
  const Tensor a = f32_of(a_in), b = f32_of(b_in);
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.num_elements() == 0) return a_in.dtype() == DType::kBF16 ? to_bf16(out) : out;
  const cuda_launch::ConvDims d = dims_of(g, p);
  cudaStream_t stream = stream_of(a, op);
  if (pass == Pass::kForward) {
    cuda_launch::conv2d_direct(code(a.dtype()), a.raw_data(), b.raw_data(), out.raw_data(), d,
                               stream);
  } else if (pass == Pass::kBackpropInput) {
    cuda_launch::conv2d_backprop_input_direct(code(a.dtype()), a.raw_data(), b.raw_data(),
                                              out.raw_data(), d, stream);
  } else {
    cuda_launch::conv2d_backprop_filter_direct(code(a.dtype()), a.raw_data(), b.raw_data(),
                                               out.raw_data(), d, stream);
  }
  return a_in.dtype() == DType::kBF16 ? to_bf16(out) : out;
}

// ---- cuDNN ---------------------------------------------------------------------------------

// The descriptors of one convolution, destroyed with it.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// How one convolution runs on cuDNN: x padded explicitly by the asymmetric part of the padding
// (x_h/x_w are the padded extents), the rest passed to cuDNN as symmetric padding.
struct Plan {
  int64_t extra_top = 0, extra_bottom = 0, extra_left = 0, extra_right = 0;
  int64_t x_h = 0, x_w = 0, sym_h = 0, sym_w = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

bool fits_int(std::initializer_list<int64_t> values) {
  for (int64_t v : values) {
    if (v < 1 || v > INT_MAX) return false;
  }
  return true;
}

// The plan, or nothing when cuDNN cannot take the convolution (f64, empty or huge extents).
std::optional<Plan> plan_for(const ConvGeometry& g, const Conv2dParams& p, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return std::nullopt;
  Plan plan;
  plan.sym_h = std::min(p.pad_top, p.pad_bottom);
  plan.sym_w = std::min(p.pad_left, p.pad_right);
  plan.extra_top = p.pad_top - plan.sym_h;
  plan.extra_bottom = p.pad_bottom - plan.sym_h;
  plan.extra_left = p.pad_left - plan.sym_w;
  plan.extra_right = p.pad_right - plan.sym_w;
  plan.x_h = g.h + plan.extra_top + plan.extra_bottom;
  plan.x_w = g.w + plan.extra_left + plan.extra_right;
  const int64_t x_elems = g.n * plan.x_h * plan.x_w * g.c, y_elems = g.n * g.oh * g.ow * g.o;
  const int64_t w_elems = g.kh * g.kw * g.cpg * g.o;
  if (!fits_int({g.n, plan.x_h, plan.x_w, g.c, g.kh, g.kw, g.cpg, g.o, g.oh, g.ow, g.groups,
                 p.stride_h, p.stride_w, p.dilation_h, p.dilation_w, plan.sym_h + 1,
                 plan.sym_w + 1, x_elems, y_elems, w_elems})) {
    return std::nullopt;
  }
  const bool tensor_cores = dtype == DType::kBF16 || cuda_tf32_allowed();
  plan.type = dtype == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  plan.math = tensor_cores ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  return plan;
}

int as_int(int64_t v) { return static_cast<int>(v); }

void describe_conv(const ConvGeometry& g, const Conv2dParams& p, const Plan& plan,
                   Descriptors& d, const char* op) {
  check_cudnn(cudnnCreateTensorDescriptor(&d.x), "cudnnCreateTensorDescriptor", op);
  check_cudnn(cudnnCreateTensorDescriptor(&d.y), "cudnnCreateTensorDescriptor", op);
  check_cudnn(cudnnCreateFilterDescriptor(&d.w), "cudnnCreateFilterDescriptor", op);
  check_cudnn(cudnnCreateConvolutionDescriptor(&d.conv), "cudnnCreateConvolutionDescriptor", op);
  check_cudnn(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, plan.type, as_int(g.n),
                                         as_int(g.c), as_int(plan.x_h), as_int(plan.x_w)),
              "cudnnSetTensor4dDescriptor", op);
  check_cudnn(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, plan.type, as_int(g.n),
                                         as_int(g.o), as_int(g.oh), as_int(g.ow)),
              "cudnnSetTensor4dDescriptor", op);
  check_cudnn(cudnnSetFilter4dDescriptor(d.w, plan.type, CUDNN_TENSOR_NHWC, as_int(g.o),
                                         as_int(g.cpg), as_int(g.kh), as_int(g.kw)),
              "cudnnSetFilter4dDescriptor", op);
  check_cudnn(cudnnSetConvolution2dDescriptor(d.conv, as_int(plan.sym_h), as_int(plan.sym_w),
                                              as_int(p.stride_h), as_int(p.stride_w),
                                              as_int(p.dilation_h), as_int(p.dilation_w),
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor", op);
  check_cudnn(cudnnSetConvolutionGroupCount(d.conv, as_int(g.groups)),
              "cudnnSetConvolutionGroupCount", op);
  check_cudnn(cudnnSetConvolutionMathType(d.conv, plan.math), "cudnnSetConvolutionMathType", op);
}

// The algorithm of one pass and the workspace it needs; algo < 0: no cuDNN algorithm fits.
struct Choice {
  int algo = -1;
  size_t workspace = 0;
};

// The first result (the fastest, when measured) that succeeded, is deterministic and GEMM-like
// (`allowed`), fits the workspace limit and, for exact f32 (FMA math), does not use tensor cores.
template <typename Perf>
Choice first_fit(const Perf* perf, int count, std::initializer_list<int> allowed, bool fma_only) {
  for (int i = 0; i < count; ++i) {
    const Perf& r = perf[i];
    bool ok = r.status == CUDNN_STATUS_SUCCESS && r.determinism == CUDNN_DETERMINISTIC &&
              r.memory <= kMaxWorkspaceBytes;
    ok = ok && !(fma_only && (r.mathType == CUDNN_TENSOR_OP_MATH ||
                              r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION));
    bool listed = false;
    for (int a : allowed) listed = listed || a == static_cast<int>(r.algo);
    if (ok && listed) return {static_cast<int>(r.algo), r.memory};
  }
  return {};
}

// The algorithm of one pass: measured once per geometry by cudnnFind* (it runs every algorithm
// on scratch buffers of its own, synchronously), so that the fastest allowed one is chosen, not
// the heuristics' first allowed one (with those, the 1-3 channel first layers ran at 0.14-0.31x
// of cuDNN's fastest on an H200); the heuristics when the measurement fails (no memory for its
// buffers, say).
Choice find_algorithm(Pass pass, cudnnHandle_t h, const Descriptors& d, const Plan& plan,
                      const char* op) {
  const bool fma_only = plan.math == CUDNN_FMA_MATH;
  int count = 0;
  Choice c;
  if (pass == Pass::kForward) {
    std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
    if (cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y,
                                             static_cast<int>(perf.size()), &count,
                                             perf.data()) != CUDNN_STATUS_SUCCESS) {
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                         static_cast<int>(perf.size()), &count,
                                                         perf.data()),
                  "cudnnGetConvolutionForwardAlgorithm_v7", op);
    }
    c = first_fit(perf.data(), count,
                  {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                   CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT},
                  fma_only);
    if (c.algo >= 0) {
      check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(
                      h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(c.algo),
                      &c.workspace),
                  "cudnnGetConvolutionForwardWorkspaceSize", op);
    }
  } else if (pass == Pass::kBackpropInput) {
    std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
    if (cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x,
                                                  static_cast<int>(perf.size()), &count,
                                                  perf.data()) != CUDNN_STATUS_SUCCESS) {
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                              static_cast<int>(perf.size()),
                                                              &count, perf.data()),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7", op);
    }
    c = first_fit(perf.data(), count,
                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1},
                  fma_only);
    if (c.algo >= 0) {
      check_cudnn(cudnnGetConvolutionBackwardDataWorkspaceSize(
                      h, d.w, d.y, d.conv, d.x,
                      static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), &c.workspace),
                  "cudnnGetConvolutionBackwardDataWorkspaceSize", op);
    }
  } else {
    std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>
        perf{};
    if (cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w,
                                                    static_cast<int>(perf.size()), &count,
                                                    perf.data()) != CUDNN_STATUS_SUCCESS) {
      check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                static_cast<int>(perf.size()),
                                                                &count, perf.data()),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7", op);
    }
    c = first_fit(perf.data(), count,
                  {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3},
                  fma_only);
    if (c.algo >= 0) {
      check_cudnn(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                      h, d.x, d.y, d.conv, d.w,
                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), &c.workspace),
                  "cudnnGetConvolutionBackwardFilterWorkspaceSize", op);
    }
  }
  return c;
}

// What one convolution pass keeps between calls: its descriptors and its algorithm.
struct CachedPass {
  Descriptors d;
  Choice choice;
};

// The descriptors and algorithm of (pass, geometry, dtype, math, GPU), each made once and
// reused by every later call (descriptors are host objects, read-only once set; each entry is
// used only under its GPU's handle mutex). A refused convolution keeps an entry with no
// algorithm, so that it goes to the direct kernels at once next time.
class PassCache {
 public:
  using Key = std::array<int64_t, 19>;
  static Key key_of(Pass pass, const ConvGeometry& g, const Conv2dParams& p, const Plan& plan,
                    int gpu) {
    return {static_cast<int64_t>(pass), plan.type, plan.math, gpu, g.n, plan.x_h, plan.x_w, g.c,
            g.kh, g.kw, g.cpg, g.o, g.groups, plan.sym_h, plan.sym_w, p.stride_h, p.stride_w,
            p.dilation_h, p.dilation_w};
  }
  static std::shared_ptr<const CachedPass> find(const Key& key) {
    std::lock_guard<std::mutex> lock(mu());
    auto it = map().find(key);
    return it == map().end() ? nullptr : it->second;
  }
  static void put(const Key& key, std::shared_ptr<const CachedPass> entry) {
    std::lock_guard<std::mutex> lock(mu());
    map()[key] = std::move(entry);
  }

 private:
  static std::mutex& mu() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::map<Key, std::shared_ptr<const CachedPass>>& map() {
    static auto* m = new std::map<Key, std::shared_ptr<const CachedPass>>;
    return *m;
  }
};

// `t` permuted on the device into a contiguous tensor of `shape`, whose element i reads t at
// source offset sum(index_d * src_strides[d]).
Tensor permuted(const Tensor& t, const Shape& shape, const std::array<int64_t, 4>& src_strides,
                const char* op) {
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  StridedIndex src;
  src.rank = 4;
  for (size_t i = 0; i < 4; ++i) {
    src.dims[i] = shape[i];
    src.strides[i] = src_strides[i];
  }
  cuda_launch::strided_copy(static_cast<int>(dtype_size(t.dtype())), t.raw_data(), src,
                            out.raw_data(), contiguous(shape, op), out.num_elements(),
                            stream_of(t, op));
  return out;
}
// HWIO [kh,kw,cpg,o] -> KRSC [o,kh,kw,cpg], and back.
Tensor to_krsc(const Tensor& w, const ConvGeometry& g, const char* op) {
  return permuted(w, {g.o, g.kh, g.kw, g.cpg}, {1, g.kw * g.cpg * g.o, g.cpg * g.o, g.o}, op);
}
Tensor to_hwio(const Tensor& w, const ConvGeometry& g, const char* op) {
  return permuted(w, {g.kh, g.kw, g.cpg, g.o}, {g.kw * g.cpg, g.cpg, 1, g.kh * g.kw * g.cpg}, op);
}

// x with the asymmetric part of the padding added (x itself when there is none).
Tensor padded_x(const Tensor& x, const Plan& plan) {
  if (plan.extra_top == 0 && plan.extra_bottom == 0 && plan.extra_left == 0 &&
      plan.extra_right == 0) {
    return x;
  }
  return registered_table.pad(
      x, {{0, 0}, {plan.extra_top, plan.extra_bottom}, {plan.extra_left, plan.extra_right}, {0, 0}},
      0.0);
}

// Runs one pass with algorithm c on the descriptors d (the second half of run_cudnn).
Tensor run_algorithm(Pass pass, const ConvGeometry& g, const Plan& plan, const Tensor& a,
                     const Tensor& b, cudnnHandle_t h, const Descriptors& d, const Choice& c,
                     const char* op) {
  Tensor workspace;
  if (c.workspace > 0) {
    workspace = Tensor::empty({static_cast<int64_t>((c.workspace + 7) / 8)}, DType::kI64,
                              a.device());
  }
  void* ws = c.workspace > 0 ? workspace.raw_data() : nullptr;
  const float one = 1.0f, zero = 0.0f;
  if (pass == Pass::kForward) {
    const Tensor x = padded_x(a, plan), w = to_krsc(b, g, op);
    Tensor y = Tensor::empty({g.n, g.oh, g.ow, g.o}, a.dtype(), a.device());
    check_cudnn(cudnnConvolutionForward(h, &one, d.x, x.raw_data(), d.w, w.raw_data(), d.conv,
                                        static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws,
                                        c.workspace, &zero, d.y, y.raw_data()),
                "cudnnConvolutionForward", op);
    return y;
  }
  if (pass == Pass::kBackpropInput) {
    const Tensor w = to_krsc(a, g, op);
    Tensor dx = Tensor::empty({g.n, plan.x_h, plan.x_w, g.c}, a.dtype(), a.device());
    check_cudnn(cudnnConvolutionBackwardData(h, &one, d.w, w.raw_data(), d.y, b.raw_data(),
                                             d.conv,
                                             static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                             ws, c.workspace, &zero, d.x, dx.raw_data()),
                "cudnnConvolutionBackwardData", op);
    if (plan.x_h == g.h && plan.x_w == g.w) return dx;
    return registered_table.slice(dx, {0, plan.extra_top, plan.extra_left, 0},
                                  {g.n, g.h, g.w, g.c});
  }
  const Tensor x = padded_x(a, plan);
  Tensor dw = Tensor::empty({g.o, g.kh, g.kw, g.cpg}, a.dtype(), a.device());
  check_cudnn(cudnnConvolutionBackwardFilter(h, &one, d.x, x.raw_data(), d.y, b.raw_data(),
                                             d.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                             ws, c.workspace, &zero, d.w, dw.raw_data()),
              "cudnnConvolutionBackwardFilter", op);
  return to_hwio(dw, g, op);
}

// Runs one pass on cuDNN; nothing when cuDNN cannot take it (the caller runs the direct kernel).
// Forward: a = x, b = w (HWIO), returns y. Backprop input: a = w, b = dy, returns dx. Backprop
// filter: a = x, b = dy, returns dw (HWIO).
std::optional<Tensor> run_cudnn(Pass pass, const ConvGeometry& g, const Conv2dParams& p,
                                const Tensor& a, const Tensor& b, const char* op) {
  const std::optional<Plan> plan = plan_for(g, p, a.dtype());
  if (!plan) return std::nullopt;
  CudnnGpu& gpu = cudnn_for(a, op);
  std::lock_guard<std::mutex> lock(gpu.mu);
  cudnnHandle_t h = gpu.handle;
  const PassCache::Key key =
      PassCache::key_of(pass, g, p, *plan, cuda::physical_gpu_of(a.device()));
  std::shared_ptr<const CachedPass> cached = PassCache::find(key);
  if (cached && cached->choice.algo < 0) return std::nullopt;
  try {
    if (!cached) {
      auto made = std::make_shared<CachedPass>();
      describe_conv(g, p, *plan, made->d, op);
      made->choice = find_algorithm(pass, h, made->d, *plan, op);
      cached = made;
      PassCache::put(key, cached);
    }
    if (cached->choice.algo < 0) return std::nullopt;
    return run_algorithm(pass, g, *plan, a, b, h, cached->d, cached->choice, op);
  } catch (const CudnnRefused&) {
    PassCache::put(key, std::make_shared<const CachedPass>());
    throw;
  }
}

// Says once per process that cuDNN refused a convolution, so that a run on the (slow) direct
// kernels is visible in the logs.
void note_refused(const char* op, const CudnnRefused& r, const ConvGeometry& g) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::fprintf(stderr,
               "[%s] cuDNN refused x [%lld,%lld,%lld,%lld] w [%lld,%lld,%lld,%lld] (%s: %s); "
               "running the direct kernels (said once)\n",
               op, static_cast<long long>(g.n), static_cast<long long>(g.h),
               static_cast<long long>(g.w), static_cast<long long>(g.c),
               static_cast<long long>(g.kh), static_cast<long long>(g.kw),
               static_cast<long long>(g.cpg), static_cast<long long>(g.o), r.call,
               cudnnGetErrorString(r.status));
}

Tensor convolve_in_operand_dtype(Pass pass, const ConvGeometry& g, const Conv2dParams& p,
                                 const Tensor& a, const Tensor& b, const Shape& out_shape,
                                 const char* op) {
  if (num_elements(out_shape) > 0 && a.num_elements() > 0 && b.num_elements() > 0) {
    try {
      if (std::optional<Tensor> out = run_cudnn(pass, g, p, a, b, op)) return *out;
    } catch (const CudnnRefused& r) {
      note_refused(op, r, g);
    }
  }
  return run_direct(pass, g, p, a, b, out_shape, op);
}

// f32_output (bf16 operands): the bf16 result widened here; cuDNN's f32-output bf16 convolution
// is not wired up yet, so this path rounds once to bf16 where the CPU's does not.
Tensor convolve(Pass pass, const ConvGeometry& g, const Conv2dParams& p, const Tensor& a,
                const Tensor& b, const Shape& out_shape, const char* op) {
  const Tensor out = convolve_in_operand_dtype(pass, g, p, a, b, out_shape, op);
  return p.f32_output ? f32_of(out) : out;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvGeometry g = checks::conv_geometry("conv2d", x.shape(), w.shape(), p);
  return convolve(Pass::kForward, g, p, x, w, {g.n, g.oh, g.ow, g.o}, "conv2d");
}

// conv2d, then the bias and the activation in place: one bias_activation pass for an f32 or f64
// result with ReLU or none (as dense), the table's binary and unary otherwise.
Tensor conv2d_bias(const Tensor& x, const Tensor& w, const Tensor& bias,
                   std::optional<UnaryOp> activation, const Conv2dParams& p) {
  Tensor y = conv2d(x, w, p);
  const bool relu = activation == UnaryOp::kRelu;
  if ((y.dtype() == DType::kF32 || y.dtype() == DType::kF64) && (!activation || relu)) {
    if (y.num_elements() > 0) {
      cuda_launch::bias_activation(code(y.dtype()), y.raw_data(), bias.raw_data(),
                                   y.num_elements() / bias.dim(0), bias.dim(0),
                                   relu ? cuda_launch::unary_op::kRelu : -1,
                                   stream_of(x, "conv2d_bias"));
    }
    return y;
  }
  y = registered_table.binary(BinaryOp::kAdd, y, bias);
  return activation ? registered_table.unary(*activation, y) : y;
}

Tensor conv2d_backprop_input(const Shape& x_shape, const Tensor& w, const Tensor& dy,
                             const Conv2dParams& p) {
  const char* op = "conv2d_backprop_input";
  const ConvGeometry g = checks::conv_geometry(op, x_shape, w.shape(), p);
  return convolve(Pass::kBackpropInput, g, p, w, dy, x_shape, op);
}

Tensor conv2d_backprop_filter(const Tensor& x, const Shape& w_shape, const Tensor& dy,
                              const Conv2dParams& p) {
  const char* op = "conv2d_backprop_filter";
  const ConvGeometry g = checks::conv_geometry(op, x.shape(), w_shape, p);
  return convolve(Pass::kBackpropFilter, g, p, x, dy, w_shape, op);
}

// This file's entries of the GPU table (kernels/gpu/gpu_kernels.h); registration.cc calls it
// before main.
void register_conv_kernels(Table& table) {
  table.conv2d = conv2d;
  table.conv2d_bias = conv2d_bias;
  table.conv2d_backprop_input = conv2d_backprop_input;
  table.conv2d_backprop_filter = conv2d_backprop_filter;
}

}  // namespace dtensor::kernels::gpu
