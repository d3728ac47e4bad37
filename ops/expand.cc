#include "ops/expand.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "dtensor/trace_hook.h"
#include "runtime/block.h"
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

// The shards of `input` on local devices `devices`, concatenated along `axis` into one tensor;
// null when they do not all have that axis and equal other dims.
std::optional<Tensor> concat_shards(const DTensor& input, const std::vector<size_t>& devices,
                                    int64_t axis) {
  const Tensor& first = input.shard(devices[0]);
  if (axis >= first.rank()) return std::nullopt;
  Shape shape = first.shape();
  shape[static_cast<size_t>(axis)] = 0;
  for (size_t device : devices) {
    const Tensor& part = input.shard(device);
    Shape other = part.shape();
    if (part.dtype() != first.dtype() || other.size() != shape.size()) return std::nullopt;
    shape[static_cast<size_t>(axis)] += other[static_cast<size_t>(axis)];
    other[static_cast<size_t>(axis)] = 0;
    for (size_t d = 0; d < other.size(); ++d) {
      if (static_cast<int64_t>(d) != axis && other[d] != shape[d]) return std::nullopt;
    }
  }
  Tensor out = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> at(shape.size(), 0);
  for (size_t device : devices) {
    const Tensor& part = input.shard(device);
    copy_box(part, std::vector<int64_t>(shape.size(), 0), out, at, part.shape());
    at[static_cast<size_t>(axis)] += part.dim(axis);
  }
  return out;
}

// Runs calls [0, n) of `call` inline, or on the pool with a share of the BLAS threads each when
// there is enough work to pay for waking it.
template <typename Call>
void run_calls(int64_t n, double work, const Call& call) {
  ThreadPool& pool = ThreadPool::global();
  const double work_each = work / static_cast<double>(std::max<int64_t>(n, 1));
  if (n > 1 && work_each >= kParallelWork && !ThreadPool::in_worker()) {
    const int threads = pool.num_threads();
    pool.parallel_for(n, [&](int64_t c) {
      blas_threads = std::max(1, threads / static_cast<int>(std::min<int64_t>(n, threads)));
      call(c);
      blas_threads = 0;
    });
  } else {
    for (int64_t c = 0; c < n; ++c) call(c);
  }
}

// Stacking::rows_of: the computations' rows of input `s` stacked into one call of `kernel`, the
// result split back by rows; false (nothing done) when the shapes do not allow it.
bool run_row_stacked(const std::vector<const DTensor*>& inputs, size_t s,
                     const std::vector<size_t>& first_device, const LocalKernel& kernel,
                     std::vector<Tensor>& results) {
  const DTensor& stacked_input = *inputs[s];
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k == s) continue;
    const Tensor& shared = inputs[k]->shard(first_device[0]);
    for (size_t device : first_device) {
      if (!inputs[k]->shard(device).is_same_as(shared)) return false;
    }
  }
  if (stacked_input.rank() != 2) return false;
  std::optional<Tensor> stacked = concat_shards(stacked_input, first_device, 0);
  if (!stacked) return false;
  std::vector<const Tensor*> shards(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    shards[k] = k == s ? &*stacked : &inputs[k]->shard(first_device[0]);
  }
  Tensor all = kernel(Shards(shards.data()));
  if (all.rank() != 2 || all.dim(0) != stacked->dim(0)) {
    throw_error<InternalError>("run_local", "a row-stacked kernel returned {} for {} rows",
                               all.to_string(), stacked->dim(0));
  }
  const size_t row_bytes = dtype_size(all.dtype()) * static_cast<size_t>(all.dim(1));
  const char* from = static_cast<const char*>(all.raw_data());
  for (size_t c = 0; c < first_device.size(); ++c) {
    const int64_t n = stacked_input.shard(first_device[c]).dim(0);
    Tensor part =
        Tensor::empty({n, all.dim(1)}, all.dtype(), stacked_input.shard(first_device[c]).device());
    std::memcpy(part.raw_data(), from, static_cast<size_t>(n) * row_bytes);
    from += static_cast<size_t>(n) * row_bytes;
    results[c] = std::move(part);
  }
  return true;
}

// Stacking::contraction_axes: one call per partial group of local devices; fills `shards` (one
// per local device) and returns true, or returns false having done nothing.
bool run_contraction_stacked(const std::vector<const DTensor*>& inputs,
                             const std::vector<int64_t>& axes, const Layout& output_layout,
                             const Shape& output_shape, DType output_dtype, double work,
                             const LocalKernel& kernel, std::vector<Tensor>& shards) {
  if (inputs.empty() || axes.size() != inputs.size() || !output_layout.is_partial() ||
      ThreadPool::in_worker()) {
    return false;
  }
  for (const PartialDim& p : output_layout.partial()) {
    if (p.op != ReduceOp::kSum) return false;
  }
  const Mesh& mesh = output_layout.mesh();
  struct Group {
    std::vector<size_t> members;  // local indices, in group order
    std::vector<size_t> terms;    // the members whose term can be nonzero
    Tensor sum;
  };
  std::vector<Group> groups;
  bool merges = false;
  for (const std::vector<int64_t>& ids : mesh.groups(output_layout.partial_mask())) {
    Group g;
    for (int64_t id : ids) {
      if (mesh.is_local(id)) g.members.push_back(static_cast<size_t>(mesh.local_index(id)));
    }
    if (g.members.empty()) continue;
    // The kernel is linear in every input: a shared-zeros operand makes the term zero.
    for (size_t m : g.members) {
      bool zero = false;
      for (const DTensor* in : inputs) zero = zero || in->shard(m).is_shared_zeros();
      if (!zero) g.terms.push_back(m);
    }
    merges = merges || g.members.size() > 1;
    groups.push_back(std::move(g));
  }
  if (!merges) return false;
  // Concatenate every input first: a shape that does not fit leaves everything to the plain path.
  std::vector<std::vector<Tensor>> args(groups.size());
  for (size_t c = 0; c < groups.size(); ++c) {
    const Group& g = groups[c];
    if (g.terms.empty()) continue;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (g.terms.size() == 1) {
        args[c].push_back(inputs[k]->shard(g.terms[0]));
        continue;
      }
      std::optional<Tensor> joined = concat_shards(*inputs[k], g.terms, axes[k]);
      if (!joined) return false;
      args[c].push_back(std::move(*joined));
    }
  }
  run_calls(static_cast<int64_t>(groups.size()), work, [&](int64_t c) {
    Group& g = groups[static_cast<size_t>(c)];
    if (g.terms.empty()) return;
    std::vector<const Tensor*> shard_ptrs;
    for (const Tensor& t : args[static_cast<size_t>(c)]) shard_ptrs.push_back(&t);
    g.sum = kernel(Shards(shard_ptrs.data()));
  });
  const auto& ids = mesh.local_device_ids();
  shards.assign(ids.size(), Tensor());
  for (const Group& g : groups) {
    const size_t holder = g.terms.empty() ? g.members[0] : g.terms[0];
    for (size_t m : g.members) {
      const Device device{mesh.device_type(), ids[m]};
      if (m == holder && !g.terms.empty()) {
        shards[m] = g.sum.with_device(device);
      } else {
        shards[m] = Tensor::shared_zeros(output_layout.shard_shape(output_shape, ids[m]),
                                         output_dtype, device);
      }
    }
  }
  return true;
}

}  // namespace

DTensor run_local(const std::vector<const DTensor*>& inputs, const Layout& output_layout,
                  const Shape& output_shape, DType output_dtype, double work,
                  const LocalKernel& kernel, Stacking stacking) {
  // Traced: the recorder keeps a copy of the kernel (kernels capture by value) and every
  // argument; the replay makes the same grouping, stacking and threading decisions on the shards
  // it then has, so it gives eager's bits.
  if (TraceHook* hook = TraceHook::active()) {
    return hook->call("run_local", inputs,
                      [output_layout, output_shape, output_dtype, work, kernel,
                       stacking](const TraceHook::Inputs& in) {
                        return run_local(in, output_layout, output_shape, output_dtype, work,
                                         kernel, stacking);
                      });
  }
  const Mesh& mesh = output_layout.mesh();
  std::vector<Tensor> shards;
  if (!stacking.contraction_axes.empty() &&
      run_contraction_stacked(inputs, stacking.contraction_axes, output_layout, output_shape,
                              output_dtype, work, kernel, shards)) {
    return DTensor::from_trusted_shards(output_shape, output_dtype, output_layout,
                                        std::move(shards));
  }
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
        same = same && in->shard(i).is_same_as(in->shard(first_device[c]));
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
    const Tensor** shard_ptrs = inline_shards;
    if (inputs.size() > kInline) {
      many.resize(inputs.size());
      shard_ptrs = many.data();
    }
    for (size_t k = 0; k < inputs.size(); ++k) shard_ptrs[k] = &inputs[k]->shard(device);
    results[static_cast<size_t>(c)] = kernel(Shards(shard_ptrs));
  };
  const int64_t n = static_cast<int64_t>(first_device.size());
  if (stacking.rows_of < 0 || n <= 1 || ThreadPool::in_worker() ||
      !run_row_stacked(inputs, static_cast<size_t>(stacking.rows_of), first_device, kernel,
                       results)) {
    run_calls(n, work, compute);
  }
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
