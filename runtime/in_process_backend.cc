// In-process collectives: all members of a group are devices of this process, so a collective
// is a set of memory copies. Identical results (all-reduce, all-gather, broadcast) are computed
// once and shared by every member.
#include <algorithm>
#include <cstring>

#include "runtime/block.h"
#include "runtime/collective_backend.h"
#include "runtime/thread_pool.h"

namespace dtensor {

std::vector<int64_t> Group::local_positions() const {
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < size(); ++i) {
    if (owners[static_cast<size_t>(i)] == self) positions.push_back(i);
  }
  return positions;
}

std::vector<Tensor> share_result(const Tensor& result, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    if (!same_memory_space(result.device(), in.device())) {
      throw_error<InternalError>("share_result",
                                 "{} on {} cannot be shared with {}: another memory space",
                                 result.to_string(), device_to_string(result.device()),
                                 device_to_string(in.device()));
    }
    out.push_back(result.with_device(in.device()));
  }
  return out;
}

void require_one_member_per_process(const Group& group, size_t num_inputs, std::string_view backend,
                                    const char* function) {
  for (size_t i = 0; i < group.owners.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (group.owners[i] == group.owners[j]) {
        throw_error<CommunicationError>(
            function,
            "the {} backend takes one member per process, but process {} owns devices {} and {} "
            "of the group; compose it with an intra-process backend (make_hierarchical_backend)",
            backend, group.owners[i], group.devices[j], group.devices[i]);
      }
    }
  }
  if (num_inputs != 1) {
    throw_error<CommunicationError>(function, "the {} backend takes one tensor per process, got {}",
                                    backend, num_inputs);
  }
}

namespace {

Shape with_dim(Shape shape, int64_t axis, int64_t size) {
  shape[static_cast<size_t>(axis)] = size;
  return shape;
}

std::vector<int64_t> at_dim(size_t rank, int64_t axis, int64_t offset) {
  std::vector<int64_t> begin(rank, 0);
  if (rank > 0) begin[static_cast<size_t>(axis)] = offset;
  return begin;
}

void require_local(const Group& group, const char* function) {
  for (size_t i = 0; i < group.devices.size(); ++i) {
    if (group.owners[i] != group.self) {
      throw_error<CommunicationError>(
          function,
          "device {} belongs to process {}; the in-process backend needs every member "
          "of a group in this process (launch with mpirun to use the MPI backend)",
          group.devices[i], group.owners[i]);
    }
  }
}

class InProcessBackend final : public CollectiveBackend {
 public:
  std::string_view name() const override { return "in-process"; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    require_local(group, "all_reduce");
    return share_result(reduce_tensors(inputs, op), inputs);
  }

  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    require_local(group, "all_gather");
    int64_t total = 0;
    for (const Tensor& in : inputs) total += in.dim(axis);
    const Tensor& first = inputs[0];
    Tensor out = Tensor::empty(with_dim(first.shape(), axis, total), first.dtype(), first.device());
    int64_t offset = 0;
    for (const Tensor& in : inputs) {
      copy_box(in, at_dim(in.shape().size(), axis, 0), out, at_dim(in.shape().size(), axis, offset),
               in.shape());
      offset += in.dim(axis);
    }
    return share_result(out, inputs);
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    require_local(group, "reduce_scatter");
    const int64_t k = group.size();
    const size_t rank = inputs[0].shape().size();
    std::vector<Tensor> out;
    for (int64_t j = 0; j < k; ++j) {
      ShardRange r = chunk_range(inputs[0].dim(axis), k, j);
      Shape extent = with_dim(inputs[0].shape(), axis, r.size);
      std::vector<Tensor> chunks;
      for (const Tensor& in : inputs)
        chunks.push_back(slice_box(in, at_dim(rank, axis, r.offset), extent));
      Tensor reduced = reduce_tensors(chunks, op);
      out.push_back(reduced.with_device(inputs[static_cast<size_t>(j)].device()));
    }
    return out;
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    require_local(group, "all_to_all");
    const int64_t k = group.size();
    const size_t rank = inputs[0].shape().size();
    std::vector<Tensor> out;
    for (int64_t j = 0; j < k; ++j) {
      // The box member j takes from every input, and where it lands.
      std::vector<ShardRange> pieces;
      int64_t concat_total = 0;
      for (const Tensor& in : inputs) {
        pieces.push_back(chunk_range(in.dim(split_axis), k, j));
        concat_total += split_axis == concat_axis ? pieces.back().size : in.dim(concat_axis);
      }
      Shape out_shape = with_dim(inputs[0].shape(), split_axis, pieces[0].size);
      out_shape = with_dim(out_shape, concat_axis, concat_total);
      Tensor result =
          Tensor::empty(out_shape, inputs[0].dtype(), inputs[static_cast<size_t>(j)].device());
      int64_t offset = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        Shape extent = with_dim(inputs[i].shape(), split_axis, pieces[i].size);
        copy_box(inputs[i], at_dim(rank, split_axis, pieces[i].offset), result,
                 at_dim(rank, concat_axis, offset), extent);
        offset += extent[static_cast<size_t>(concat_axis)];
      }
      out.push_back(result);
    }
    return out;
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    require_local(group, "broadcast");
    return share_result(inputs[static_cast<size_t>(root)], inputs);
  }

  void barrier(const Group& group) override { require_local(group, "barrier"); }
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_in_process_backend() {
  return std::make_shared<InProcessBackend>();
}

}  // namespace dtensor
