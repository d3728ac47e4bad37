#include "kernels/cuda/profile.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/error.h"

namespace dtensor::kernels::gpu {
namespace {

constexpr const char* kSwitch = "DTENSOR_GPU_PROFILE";
// Calls whose events are left pending before they are synchronized and summed.
constexpr size_t kMaxPending = 1024;

bool installed = false;  // written once before main

// The calls timed so far, by op, and the events still in flight. One per process, never destroyed.
class Profiler {
 public:
  static Profiler& get() {
    static auto* profiler = new Profiler;
    return *profiler;
  }

  // Two events on the current GPU (`gpu`), reused from earlier calls where possible.
  std::pair<cudaEvent_t, cudaEvent_t> take(int gpu, const Device& device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!exit_hook_) {
      // Registered after CUDA started, so it runs before CUDA's own teardown.
      exit_hook_ = true;
      std::atexit([] { Profiler::get().print(stderr); });
    }
    std::vector<cudaEvent_t>& free = free_[gpu];
    std::pair<cudaEvent_t, cudaEvent_t> events{};
    for (cudaEvent_t* e : {&events.first, &events.second}) {
      if (free.empty()) {
        cuda::check_cuda(cudaEventCreate(e), "cudaEventCreate", kSwitch, &device);
      } else {
        *e = free.back();
        free.pop_back();
      }
    }
    return events;
  }

  void finish(std::string op, int gpu, cudaEvent_t start, cudaEvent_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back({std::move(op), gpu, start, end});
    if (pending_.size() >= kMaxPending) drain();
  }

  void give_back(int gpu, cudaEvent_t start, cudaEvent_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[gpu].push_back(start);
    free_[gpu].push_back(end);
  }

  void print(std::FILE* out) {
    std::lock_guard<std::mutex> lock(mu_);
    drain();
    if (rows_.empty()) return;
    std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double total_ms = 0;
    int64_t total_calls = 0;
    for (const auto& r : rows) {
      total_ms += r.second.ms;
      total_calls += r.second.calls;
    }
    std::fprintf(out, "GPU profile (%s=1): %lld front calls, %.3f ms of stream time\n", kSwitch,
                 static_cast<long long>(total_calls), total_ms);
    std::fprintf(out, "%-36s %10s %12s %7s\n", "op", "calls", "total ms", "share");
    for (const auto& [op, row] : rows) {
      std::fprintf(out, "%-36s %10lld %12.3f %6.1f%%\n", op.c_str(),
                   static_cast<long long>(row.calls), row.ms,
                   total_ms > 0 ? 100.0 * row.ms / total_ms : 0.0);
    }
    std::fflush(out);
    rows_.clear();
  }

  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    drain();
    rows_.clear();
  }

 private:
  struct Row {
    int64_t calls = 0;
    double ms = 0;
  };
  struct Pending {
    std::string op;
    int gpu;
    cudaEvent_t start, end;
  };

  // Waits for the pending calls' events and adds their times (a failed call counts 0 ms).
  void drain() {
    for (Pending& p : pending_) {
      float ms = 0;
      if (cudaEventSynchronize(p.end) != cudaSuccess ||
          cudaEventElapsedTime(&ms, p.start, p.end) != cudaSuccess) {
        cudaGetLastError();
        ms = 0;
      }
      Row& row = rows_[p.op];
      row.calls += 1;
      row.ms += ms;
      free_[p.gpu].push_back(p.start);
      free_[p.gpu].push_back(p.end);
    }
    pending_.clear();
  }

  std::mutex mu_;
  std::map<std::string, Row> rows_;
  std::vector<Pending> pending_;
  std::map<int, std::vector<cudaEvent_t>> free_;
  bool exit_hook_ = false;
};

thread_local int depth = 0;  // profiled calls in flight on this thread

// Times one front call on `device`'s stream; inside another profiled call, it only counts depth.
class ProfiledCall {
 public:
  ProfiledCall(std::string_view op, const Device& device) {
    if (depth > 0) {
      ++depth;
      return;
    }
    parse_gpu_profile_switch(std::getenv(kSwitch));  // throws for a bad value
    stream_ = cuda::activate(device, kSwitch);
    gpu_ = cuda::physical_gpu_of(device);
    std::tie(start_, end_) = Profiler::get().take(gpu_, device);
    const cudaError_t status = cudaEventRecord(start_, stream_);
    if (status != cudaSuccess) {
      Profiler::get().give_back(gpu_, start_, end_);
      cuda::check_cuda(status, "cudaEventRecord", kSwitch, &device);
    }
    op_ = op;
    timed_ = true;
    ++depth;
  }
  ProfiledCall(const ProfiledCall&) = delete;
  ProfiledCall& operator=(const ProfiledCall&) = delete;
  ~ProfiledCall() {
    --depth;
    if (!timed_) return;
    if (cudaEventRecord(end_, stream_) == cudaSuccess) {
      Profiler::get().finish(std::move(op_), gpu_, start_, end_);
    } else {
      cudaGetLastError();
      Profiler::get().give_back(gpu_, start_, end_);
    }
  }

 private:
  bool timed_ = false;
  std::string op_;
  int gpu_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

// The device of a call: that of the first tensor whose device type picks the backend.
const Device& device_of(const Tensor& t) { return t.device(); }
const Device& device_of(const std::vector<Tensor>& ts) { return ts.at(0).device(); }  // concat
template <typename First, typename... Rest>
const Device& first_device(const First& first, const Rest&...) {
  return device_of(first);
}

// The op as the table names it, or by the op enum where one entry serves several ops.
std::string_view profile_name(const char* entry, UnaryOp op) { return unary_op_name(op); }
std::string_view profile_name(const char* entry, BinaryOp op) { return binary_op_name(op); }
std::string_view profile_name(const char* entry, ReduceKind kind) {
  return reduce_kind_name(kind);
}
template <typename Op>
std::string_view profile_name(const char* entry, const Op&) {
  return entry;
}

#define DTENSOR_PROFILED_ENTRY(ret, name, params, args, op, devices, check) \
  ret(*original_##name) params = nullptr;                                   \
  ret profiled_##name params {                                              \
    ProfiledCall call(profile_name(#name, op), first_device devices);       \
    return original_##name args;                                            \
  }
#define DTENSOR_KERNEL DTENSOR_PROFILED_ENTRY
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_PROFILED_ENTRY
#include "kernels/kernel_list.h"
#define DTENSOR_ELEMENT_LOOP DTENSOR_PROFILED_ENTRY
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP
#undef DTENSOR_PROFILED_ENTRY

// The host <-> GPU copies: a to_host in a training step shows here.
Tensor (*original_copy_to_gpu)(const Tensor&, const Device&) = nullptr;
Tensor profiled_copy_to_gpu(const Tensor& host, const Device& device) {
  ProfiledCall call("copy_to_gpu", device);
  return original_copy_to_gpu(host, device);
}
Tensor (*original_copy_to_host)(const Tensor&) = nullptr;
Tensor profiled_copy_to_host(const Tensor& tensor) {
  ProfiledCall call("copy_to_host", tensor.device());
  return original_copy_to_host(tensor);
}

}  // namespace

bool parse_gpu_profile_switch(const char* value) {
  if (value == nullptr || std::strcmp(value, "") == 0 || std::strcmp(value, "0") == 0) {
    return false;
  }
  if (std::strcmp(value, "1") == 0) return true;
  throw_error<InvalidArgumentError>(kSwitch, "must be 0 or 1, got '{}'", value);
}

bool profile_requested() {
  const char* value = std::getenv(kSwitch);
  return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}

bool gpu_profile_enabled() {
  try {
    return installed && parse_gpu_profile_switch(std::getenv(kSwitch));
  } catch (const InvalidArgumentError&) {
    return false;
  }
}

void profile_table(Table& table) {
#define DTENSOR_WRAP_ENTRY(ret, name, params, args, op, devices, check) \
  if (table.name != nullptr) {                                          \
    original_##name = table.name;                                       \
    table.name = profiled_##name;                                       \
  }
#define DTENSOR_KERNEL DTENSOR_WRAP_ENTRY
#define DTENSOR_OPTIMIZER_KERNEL DTENSOR_WRAP_ENTRY
#include "kernels/kernel_list.h"
#define DTENSOR_ELEMENT_LOOP DTENSOR_WRAP_ENTRY
#include "runtime/element_loop_list.h"
#undef DTENSOR_ELEMENT_LOOP
  DTENSOR_WRAP_ENTRY(, copy_to_gpu, , , , , )
  DTENSOR_WRAP_ENTRY(, copy_to_host, , , , , )
#undef DTENSOR_WRAP_ENTRY
  installed = true;
}

void print_gpu_profile(std::FILE* out) { Profiler::get().print(out); }

void reset_gpu_profile() { Profiler::get().reset(); }

}  // namespace dtensor::kernels::gpu
