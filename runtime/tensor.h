// Tensor: a dense, contiguous, row-major array on one device.
//
// A Tensor is a handle: copies share the same storage (like a shared_ptr), so passing Tensors
// around is cheap and `clone()` makes an independent copy. Storage is 64-byte aligned. Distinct
// Tensors may be used from different threads; writes to one storage from several threads need
// external synchronisation. `is_unique()` tells whether this handle is the only owner, which
// copy-on-write users check before writing in place.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace dtensor {

// Owns one 64-byte aligned allocation from an Allocator (runtime/allocator.h), and gives it back
// to that allocator when destroyed. Storage from BufferPool may be larger than the tensors that
// use it: a Tensor's byte count comes from its shape, not from its storage.
class Storage {
 public:
  // Host memory from host_allocator().
  explicit Storage(size_t nbytes);
  // `nbytes` from `allocator` in the memory of `device`; `function` names the caller in errors.
  Storage(Allocator& allocator, size_t nbytes, const Device& device, const char* function);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  // Where the bytes live: host memory can be read by the host (and every CPU kernel).
  MemorySpace memory_space() const { return space_; }
  // True for the process-wide zero storage behind Tensor::shared_zeros.
  bool is_shared_zeros() const { return shared_zeros_; }
  // True for bytes inside another storage (Tensor::leading_view), which this one keeps alive.
  bool is_view() const { return parent_ != nullptr; }

 private:
  friend class Tensor;
  struct ZeroPages {};
  // Read-only zeros from anonymous memory: pages that are only read take no physical memory.
  Storage(size_t nbytes, ZeroPages);
  // `nbytes` at byte `offset` of `parent`, which owns them (or of its own parent, for a view).
  Storage(std::shared_ptr<Storage> parent, size_t offset, size_t nbytes);
  // The storage that owns the bytes of `storage` (itself unless a view), `offset` moved to it:
  // views cut from views share the first parent, so that joined_view can put them together.
  static std::shared_ptr<Storage> root_of(std::shared_ptr<Storage> storage, size_t& offset);

  void* data_;
  size_t nbytes_;
  Allocator* allocator_ = nullptr;  // gets data_ back; null for mapped zero pages
  Device device_;                   // the device whose memory holds data_
  MemorySpace space_ = MemorySpace::kHost;
  bool shared_zeros_ = false;
  size_t mapped_ = 0;                // bytes mapped with mmap (unmapped, not freed), or 0
  std::shared_ptr<Storage> parent_;  // a view's owner, or null
};

class Tensor {
 public:
  // An empty f32 scalar-less tensor (shape [0]); mostly a placeholder.
  Tensor();
  // Uninitialised storage for `shape` and `dtype` in the memory of `device`, from the allocator
  // of device.type (runtime/allocator.h): host memory comes from BufferPool::global() (it may
  // hold old contents of a recycled buffer). GPU memory in a build without CUDA throws
  // UnimplementedError naming the device.
  static Tensor empty(const Shape& shape, DType dtype, Device device = {});
  // Zero-filled.
  static Tensor zeros(const Shape& shape, DType dtype, Device device = {});
  // Zero-filled, on storage shared by the whole process and never written: a stand-in that
  // costs no allocation, for a term known to contribute nothing (a partial sum's other terms
  // once one shard holds the sum; see ops/expand.h). On the host: read-only mapped zero pages,
  // which take no physical memory, and a write faults. It is never unique. Other memory spaces
  // get a zero-filled buffer of their own (no sharing across devices).
  static Tensor shared_zeros(const Shape& shape, DType dtype, Device device = {});
  // Wraps existing storage; `storage` must hold at least num_elements(shape) * dtype_size bytes.
  Tensor(Shape shape, DType dtype, Device device, std::shared_ptr<Storage> storage);

  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[static_cast<size_t>(i)]; }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  int64_t num_elements() const { return num_elements_; }
  size_t nbytes() const { return static_cast<size_t>(num_elements_) * dtype_size(dtype_); }

  void* raw_data() { return storage_->data(); }
  const void* raw_data() const { return storage_->data(); }

  // Typed access; throws DTypeError if T does not match dtype().
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(storage_->data());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(storage_->data());
  }

  // A deep copy with its own storage.
  Tensor clone() const;
  // Same storage, other device tag (for moving a handle between virtual CPU devices). It moves no
  // bytes: share only between devices for which same_memory_space() holds.
  Tensor with_device(Device device) const;
  // Same storage, other shape with the same number of elements.
  Tensor reshaped(const Shape& shape) const;
  // Elements [begin, end) of dim 0 (rank >= 1) as a tensor reading this one's bytes, no copy;
  // null when they would not start 64-byte aligned (the alignment every Storage promises).
  // Meant for reading: a view is never unique, so copy-on-write code leaves it alone. A view of
  // a view reads (and keeps alive) the first one's parent.
  std::optional<Tensor> leading_view(int64_t begin, int64_t end) const;
  // `parts` put together along dim 0 as one tensor of `device` that reads their bytes, no copy:
  // when they are views (leading_view) of one storage that follow each other in memory in the
  // order given, with one dtype and equal dims but the first; null otherwise (a copy is then the
  // caller's to make). The result is a view like the parts. Throws ShapeError for no parts.
  static std::optional<Tensor> joined_view(const std::vector<const Tensor*>& parts, Device device);
  // True if no other Tensor shares this storage (a view shares its parent's).
  bool is_unique() const { return storage_.use_count() == 1 && !storage_->is_view(); }
  // How many handles share this storage, this one included (a view of it counts once).
  int64_t holders() const { return storage_->is_view() ? -1 : storage_.use_count(); }
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // True if both handles view the same elements: same storage, shape and dtype (shared zeros of
  // different shapes share storage but are different tensors). Devices are ignored.
  bool is_same_as(const Tensor& other) const {
    return storage_ == other.storage_ && shape_ == other.shape_ && dtype_ == other.dtype_;
  }
  // True if this is a shared_zeros tensor (all elements zero, storage read-only).
  bool is_shared_zeros() const { return storage_->is_shared_zeros(); }
  // Where the elements live (host memory for every CPU tensor).
  MemorySpace memory_space() const { return storage_->memory_space(); }

  // "f32[2,3]@CPU:0"
  std::string to_string() const;

 private:
  void check_type(DType requested) const;

  Shape shape_;
  DType dtype_;
  Device device_;
  int64_t num_elements_;
  std::shared_ptr<Storage> storage_;
};

// True if shapes, dtypes and bytes are identical (device tags are ignored). Host memory only.
bool bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace dtensor
