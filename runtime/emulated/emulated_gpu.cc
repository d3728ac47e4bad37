#include "runtime/emulated/emulated_gpu.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>

#include "runtime/backend_registry.h"
#include "runtime/emulated/opaque_memory.h"
#include "runtime/emulated/transfer.h"
#include "runtime/error.h"
#include "runtime/gpu_backend.h"
#include "runtime/gpu_in_process_backend.h"

namespace dtensor::emulated {
namespace {

std::atomic<int> gpu_count{0};
// Why DTENSOR_EMULATED_GPUS was refused at start-up; empty if it was not.
std::string& bad_switch() {
  static auto* text = new std::string;
  return *text;
}

Stream& stream(int gpu) {
  static auto* streams = [] {
    auto* s = new Stream[kMaxGpus];
    for (int i = 0; i < kMaxGpus; ++i) s[i].gpu = i;
    return s;
  }();
  return streams[gpu];
}

// Opaque pages for every GPU tensor; fills and copies open them for their length only.
class EmulatedAllocator final : public Allocator {
 public:
  MemorySpace memory_space() const override { return MemorySpace::kGpu; }

  void* allocate(size_t nbytes, const Device& device, const char* function) override {
    require_gpu(device, function);
    return allocate_opaque(nbytes);
  }
  void free(void* data, size_t, const Device&) noexcept override { free_opaque(data); }
  void fill_zeros(void* data, size_t nbytes, const Device& device) override {
    activate(device, "fill_zeros");
    OpenWindow window({data});
    std::memset(data, 0, nbytes);
  }
  void copy(void* dst, const void* src, size_t nbytes, const Device& device) override {
    activate(device, "copy");
    OpenWindow window({dst, src});
    std::memcpy(dst, src, nbytes);
  }
};

std::shared_ptr<CollectiveBackend> make_collectives() {
  return make_gpu_in_process_backend(GpuPlacement{physical_gpu_of, to_device},
                                     "in-process emulated GPU");
}

void register_backend() {
  static auto* allocator = new EmulatedAllocator;
  register_gpu_backend(GpuBackend{"emulated", allocator, make_collectives, true, physical_gpu_of});
}

// DTENSOR_EMULATED_GPUS at start-up. A bad value still registers the backend, so that the first
// GPU allocation reports the value instead of "no GPU backend".
[[maybe_unused]] const bool from_environment = [] {
  try {
    if (std::optional<int> n = requested_gpus()) enable(*n);
  } catch (const Error& e) {
    bad_switch() = e.what();
    register_backend();
  }
  return true;
}();

}  // namespace

std::optional<int> requested_gpus() {
  const char* value = std::getenv(kEnvironmentVariable);
  if (value == nullptr) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || n < 1 || n > kMaxGpus) {
    throw_error<InvalidArgumentError>(kEnvironmentVariable, "'{}' is not a GPU count (1 to {})",
                                      value, kMaxGpus);
  }
  return static_cast<int>(n);
}

void enable(int physical_gpus) {
  if (physical_gpus < 1 || physical_gpus > kMaxGpus) {
    throw_error<InvalidArgumentError>("emulated::enable", "{} is not a GPU count (1 to {})",
                                      physical_gpus, kMaxGpus);
  }
  gpu_count.store(physical_gpus);
  register_backend();
  register_collective_backends(DeviceType::kGPU, make_collectives(), nullptr);
}

bool enabled() { return gpu_count.load() > 0; }

int physical_gpu_count() { return gpu_count.load(); }

void require_gpu(const Device& device, const char* function) {
  if (device.type != DeviceType::kGPU) {
    throw_error<InvalidArgumentError>(function, "{} is not a GPU device",
                                      device_to_string(device));
  }
  if (!enabled()) {
    throw_error<UnimplementedError>(
        function, "{} is not an emulated GPU device: {}", device_to_string(device),
        bad_switch().empty() ? std::string("the emulated GPU is off (set ") +
                                   kEnvironmentVariable + "=N)"
                             : bad_switch());
  }
}

int physical_gpu_of(const Device& device) {
  require_gpu(device, "physical_gpu_of");
  return static_cast<int>(device.id % physical_gpu_count());
}

Stream& activate(const Device& device, const char* function) {
  require_gpu(device, function);
  Stream& s = stream(static_cast<int>(device.id % physical_gpu_count()));
  s.launches.fetch_add(1, std::memory_order_relaxed);
  return s;
}

void synchronize(const Device& device, const char* function) { require_gpu(device, function); }

}  // namespace dtensor::emulated
