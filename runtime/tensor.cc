#include "runtime/tensor.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "runtime/buffer_pool.h"

namespace dtensor {

Storage::Storage(size_t nbytes) : Storage(host_allocator(), nbytes, Device{}, "Storage") {}

Storage::Storage(Allocator& allocator, size_t nbytes, const Device& device, const char* function)
    : data_(allocator.allocate(nbytes, device, function)),
      nbytes_(nbytes),
      allocator_(&allocator),
      device_(device),
      space_(allocator.memory_space()) {}

Storage::Storage(size_t nbytes, ZeroPages) : nbytes_(nbytes), shared_zeros_(true) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  mapped_ = std::max(page, (nbytes + page - 1) / page * page);
  data_ = ::mmap(nullptr, mapped_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data_ == MAP_FAILED) throw std::bad_alloc();
}

std::shared_ptr<Storage> Storage::root_of(std::shared_ptr<Storage> storage, size_t& offset) {
  while (storage->parent_) {
    offset += static_cast<size_t>(static_cast<const char*>(storage->data_) -
                                  static_cast<const char*>(storage->parent_->data_));
    storage = storage->parent_;
  }
  return storage;
}

Storage::Storage(std::shared_ptr<Storage> parent, size_t offset, size_t nbytes)
    : nbytes_(nbytes), parent_(root_of(std::move(parent), offset)) {
  data_ = static_cast<char*>(parent_->data_) + offset;
  device_ = parent_->device_;
  space_ = parent_->space_;
}

Storage::~Storage() {
  if (parent_) return;  // the parent owns the bytes
  if (mapped_ > 0) {
    ::munmap(data_, mapped_);
  } else {
    allocator_->free(data_, nbytes_, device_);
  }
}

namespace {
// Shared by every default-constructed Tensor: it holds no elements, so nothing writes it.
const std::shared_ptr<Storage>& empty_storage() {
  static const auto* storage = new std::shared_ptr<Storage>(std::make_shared<Storage>(0));
  return *storage;
}
}  // namespace

Tensor::Tensor() : Tensor(Shape{0}, DType::kF32, Device{}, empty_storage()) {}

Tensor::Tensor(Shape shape, DType dtype, Device device, std::shared_ptr<Storage> storage)
    : shape_(std::move(shape)),
      dtype_(dtype),
      device_(device),
      num_elements_(dtensor::num_elements(shape_)),
      storage_(std::move(storage)) {
  validate_shape(shape_, "Tensor");
  DTENSOR_CHECK(storage_ != nullptr && storage_->nbytes() >= nbytes());
}

namespace {
// Allocates with `allocate`, turning an exhausted allocator into an error that says what was
// asked for (std::bad_alloc must not escape to the caller).
template <typename Allocate>
std::shared_ptr<Storage> allocate_or_throw(const char* function, const Shape& shape, DType dtype,
                                           int64_t nbytes, Allocate&& allocate) {
  try {
    return allocate(static_cast<size_t>(nbytes));
  } catch (const std::bad_alloc&) {
    throw_error<InvalidArgumentError>(function, "cannot allocate {} bytes for {}{}", nbytes,
                                      dtype_name(dtype), shape_to_string(shape));
  }
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const int64_t nbytes =
      checked_num_bytes(shape, static_cast<int64_t>(dtype_size(dtype)), "Tensor::empty");
  if (device.type == DeviceType::kCPU) {
    // The hot path: host memory recycled by the pool, no call through the Allocator interface.
    return Tensor(shape, dtype, device,
                  allocate_or_throw("Tensor::empty", shape, dtype, nbytes,
                                    [](size_t n) { return BufferPool::global().acquire(n); }));
  }
  return Tensor(
      shape, dtype, device, allocate_or_throw("Tensor::empty", shape, dtype, nbytes, [&](size_t n) {
        return std::make_shared<Storage>(allocator_for(device.type), n, device, "Tensor::empty");
      }));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.type == DeviceType::kCPU) {
    std::memset(t.raw_data(), 0, t.nbytes());
  } else {
    allocator_for(device.type).fill_zeros(t.raw_data(), t.nbytes(), device);
  }
  return t;
}

Tensor Tensor::shared_zeros(const Shape& shape, DType dtype, Device device) {
  const size_t nbytes = static_cast<size_t>(
      checked_num_bytes(shape, static_cast<int64_t>(dtype_size(dtype)), "Tensor::shared_zeros"));
  // Mapped zero pages are host memory; a device's zeros are its own (still never written).
  if (device.type != DeviceType::kCPU) return zeros(shape, dtype, device);
  // Grown geometrically; outgrown storages stay registered (tensors may still view them), so
  // none ever becomes unique and no caller can take it for a private buffer.
  static std::mutex mu;
  static auto* storages = new std::vector<std::shared_ptr<Storage>>;
  std::shared_ptr<Storage> storage;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (storages->empty() || storages->back()->nbytes() < nbytes) {
      const size_t size = std::max<size_t>(
          {nbytes, storages->empty() ? 0 : 2 * storages->back()->nbytes(), size_t{1} << 16});
      storages->push_back(allocate_or_throw(
          "Tensor::shared_zeros", shape, dtype, static_cast<int64_t>(size),
          [](size_t n) { return std::shared_ptr<Storage>(new Storage(n, Storage::ZeroPages{})); }));
    }
    storage = storages->back();
  }
  return Tensor(shape, dtype, device, std::move(storage));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  if (device_.type == DeviceType::kCPU) {
    std::memcpy(t.raw_data(), raw_data(), nbytes());
  } else {
    allocator_for(device_.type).copy(t.raw_data(), raw_data(), nbytes(), device_);
  }
  return t;
}

Tensor Tensor::with_device(Device device) const { return Tensor(shape_, dtype_, device, storage_); }

Tensor Tensor::reshaped(const Shape& shape) const {
  if (dtensor::num_elements(shape) != num_elements_) {
    throw_error<ShapeError>("Tensor::reshaped", "cannot reshape {} to {}", to_string(),
                            shape_to_string(shape));
  }
  return Tensor(shape, dtype_, device_, storage_);
}

std::optional<Tensor> Tensor::leading_view(int64_t begin, int64_t end) const {
  if (shape_.empty() || begin < 0 || end < begin || end > shape_[0]) {
    throw_error<ShapeError>("Tensor::leading_view", "rows [{}, {}) are outside {}", begin, end,
                            to_string());
  }
  Shape shape = shape_;
  shape[0] = end - begin;
  const size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<size_t>(shape_[0]);
  const size_t offset = static_cast<size_t>(begin) * row_bytes;
  if (offset % 64 != 0) return std::nullopt;
  if (begin == 0 && end == shape_[0]) return *this;
  auto view = std::shared_ptr<Storage>(
      new Storage(storage_, offset, static_cast<size_t>(end - begin) * row_bytes));
  return Tensor(shape, dtype_, device_, std::move(view));
}

std::optional<Tensor> Tensor::joined_view(const std::vector<const Tensor*>& parts, Device device) {
  if (parts.empty()) throw_error<ShapeError>("Tensor::joined_view", "no parts to join");
  const Tensor& first = *parts[0];
  if (first.rank() == 0 || !first.storage_->is_view()) return std::nullopt;
  const std::shared_ptr<Storage>& parent = first.storage_->parent_;
  Shape shape = first.shape_;
  shape[0] = 0;
  const char* next = static_cast<const char*>(first.raw_data());
  for (const Tensor* part : parts) {
    if (!part->storage_->is_view() || part->storage_->parent_ != parent ||
        part->dtype_ != first.dtype_ || part->rank() != first.rank() ||
        !std::equal(part->shape_.begin() + 1, part->shape_.end(), first.shape_.begin() + 1) ||
        static_cast<const char*>(part->raw_data()) != next) {
      return std::nullopt;
    }
    next += part->nbytes();
    shape[0] += part->shape_[0];
  }
  const char* start = static_cast<const char*>(first.raw_data());
  const auto offset = static_cast<size_t>(start - static_cast<const char*>(parent->data()));
  auto view =
      std::shared_ptr<Storage>(new Storage(parent, offset, static_cast<size_t>(next - start)));
  return Tensor(std::move(shape), first.dtype_, device, std::move(view));
}

std::string Tensor::to_string() const {
  return fmt::format("{}{}@{}", dtype_name(dtype_), shape_to_string(shape_),
                     device_to_string(device_));
}

void Tensor::check_type(DType requested) const {
  if (requested != dtype_) {
    throw_error<DTypeError>("Tensor::data", "requested {} from a {} tensor", dtype_name(requested),
                            to_string());
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace dtensor
