#include "ops/expand.h"

#include <cstring>

#include "runtime/thread_pool.h"

namespace dtensor {
namespace {

thread_local int blas_threads = 0;

// Below this much work per computation, waking the pool costs more than it saves.
constexpr double kParallelWork = 2e5;

}  // namespace

int local_blas_threads() {
  return blas_threads > 0 ? blas_threads : ThreadPool::global().num_threads();
}

namespace {

// The computations' rows of input `s` stacked into one call of `kernel`, the result split back
// by rows; false (nothing done) when the shapes do not allow it.
bool run_stacked(const std::vector<const DTensor*>& inputs, size_t s,
                 const std::vector<size_t>& first_device, const LocalKernel& kernel,
                 std::vector<Tensor>& results) {
  const DTensor& stacked_input = *inputs[s];
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k == s) continue;
    const void* shared = inputs[k]->shard(first_device[0]).raw_data();
    for (size_t device : first_device) {
      if (inputs[k]->shard(device).raw_data() != shared) return false;
    }
  }
  if (stacked_input.rank() != 2) return false;
  int64_t rows = 0;
  std::vector<int64_t> row_begin;
  for (size_t device : first_device) {
    row_begin.push_back(rows);
    rows += stacked_input.shard(device).dim(0);
  }
  const Tensor& first = stacked_input.shard(first_device[0]);
  Tensor stacked = Tensor::empty({rows, first.dim(1)}, first.dtype(), first.device());
  for (size_t c = 0; c < first_device.size(); ++c) {
    const Tensor& part = stacked_input.shard(first_device[c]);
    std::memcpy(static_cast<char*>(stacked.raw_data()) +
                    static_cast<size_t>(row_begin[c]) * part.nbytes() /
                        static_cast<size_t>(std::max<int64_t>(part.dim(0), 1)),
                part.raw_data(), part.nbytes());
  }
  std::vector<const Tensor*> shards(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    shards[k] = k == s ? &stacked : &inputs[k]->shard(first_device[0]);
  }
  Tensor all = kernel(Shards(shards.data()));
  if (all.rank() != 2 || all.dim(0) != rows) {
    throw_error<InternalError>("run_local", "a row-stacked kernel returned {} for {} rows",
                               all.to_string(), rows);
  }
  const size_t row_bytes = dtype_size(all.dtype()) * static_cast<size_t>(all.dim(1));
  for (size_t c = 0; c < first_device.size(); ++c) {
    const int64_t n = stacked_input.shard(first_device[c]).dim(0);
    Tensor part =
        Tensor::empty({n, all.dim(1)}, all.dtype(), stacked_input.shard(first_device[c]).device());
    std::memcpy(
        part.raw_data(),
        static_cast<const char*>(all.raw_data()) + static_cast<size_t>(row_begin[c]) * row_bytes,
        static_cast<size_t>(n) * row_bytes);
    results[c] = std::move(part);
  }
  return true;
}

}  // namespace

DTensor run_local(const std::vector<const DTensor*>& inputs, const Layout& output_layout,
                  const Shape& output_shape, DType output_dtype, double work,
                  const LocalKernel& kernel, int stack_rows_of) {
  const Mesh& mesh = output_layout.mesh();
  const size_t num_local = static_cast<size_t>(mesh.num_local_devices());
  // Group devices by the buffers they read: one computation per distinct set. A linear scan:
  // there are few local devices and this runs on every op.
  std::vector<size_t> computation_of(num_local);
  std::vector<size_t> first_device;
  first_device.reserve(num_local);
  for (size_t i = 0; i < num_local; ++i) {
    size_t c = 0;
    for (; c < first_device.size(); ++c) {
      bool same = true;
      for (const DTensor* in : inputs) {
        same = same && in->shard(i).raw_data() == in->shard(first_device[c]).raw_data();
      }
      if (same) break;
    }
    if (c == first_device.size()) first_device.push_back(i);
    computation_of[i] = c;
  }
  // A device with no inputs (or with only empty shards) still computes its own result.
  if (inputs.empty()) {
    first_device.clear();
    for (size_t i = 0; i < num_local; ++i) {
      computation_of[i] = i;
      first_device.push_back(i);
    }
  }
  std::vector<Tensor> results(first_device.size());
  auto compute = [&](int64_t c) {
    const size_t device = first_device[static_cast<size_t>(c)];
    constexpr size_t kInline = 8;
    const Tensor* inline_shards[kInline];
    std::vector<const Tensor*> many;
    const Tensor** shards = inline_shards;
    if (inputs.size() > kInline) {
      many.resize(inputs.size());
      shards = many.data();
    }
    for (size_t k = 0; k < inputs.size(); ++k) shards[k] = &inputs[k]->shard(device);
    results[static_cast<size_t>(c)] = kernel(Shards(shards));
  };
  ThreadPool& pool = ThreadPool::global();
  const int64_t n = static_cast<int64_t>(first_device.size());
  const double work_each = work / static_cast<double>(std::max<int64_t>(n, 1));
  if (stack_rows_of >= 0 && n > 1 && !ThreadPool::in_worker() &&
      run_stacked(inputs, static_cast<size_t>(stack_rows_of), first_device, kernel, results)) {
    // Done in one call.
  } else if (n > 1 && work_each >= kParallelWork && !ThreadPool::in_worker()) {
    const int threads = pool.num_threads();
    pool.parallel_for(n, [&](int64_t c) {
      blas_threads = std::max(1, threads / static_cast<int>(std::min<int64_t>(n, threads)));
      compute(c);
      blas_threads = 0;
    });
  } else {
    for (int64_t c = 0; c < n; ++c) compute(c);
  }
  std::vector<Tensor> shards;
  shards.reserve(num_local);
  const auto& ids = mesh.local_device_ids();
  for (size_t i = 0; i < num_local; ++i) {
    const Tensor& r = results[computation_of[i]];
    shards.push_back(r.device().id == ids[i] ? r
                                             : r.with_device(Device{mesh.device_type(), ids[i]}));
  }
  return DTensor::from_trusted_shards(output_shape, output_dtype, output_layout, std::move(shards));
}

}  // namespace dtensor
