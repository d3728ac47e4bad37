#include "runtime/nccl/nccl_backend.h"

#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend_registry.h"
#include "runtime/block.h"
#include "runtime/collective_agreement.h"
#include "runtime/cuda/gpu_collectives.h"
#include "runtime/cuda/gpu_devices.h"
#include "runtime/cuda/transfer.h"
#include "runtime/mpi/control_channel.h"
#include "runtime/mpi/mpi_check.h"
#include "runtime/process.h"

namespace dtensor {
namespace {

std::string group_text(const Group& group) {
  std::string s = "[";
  for (size_t i = 0; i < group.devices.size(); ++i) {
    s += (i ? "," : "") + std::to_string(group.devices[i]);
  }
  return s + "]";
}

double timeout_seconds() {
  const char* env = std::getenv("DTENSOR_NCCL_TIMEOUT");
  const double t = env ? std::atof(env) : 300.0;
  return t > 0 ? t : 300.0;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kBool:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype) {
  if (dtype == DType::kBool) return op == ReduceOp::kMin ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// The communicators of one group: one per local member, with the member's device and stream.
struct Comms {
  std::vector<ncclComm_t> comms;
  std::vector<Device> devices;
  std::vector<int> ranks;  // each local member's position in the group
};

class NcclBackend final : public CollectiveBackend {
 public:
  std::string_view name() const override { return "NCCL"; }

  std::vector<Tensor> all_reduce(const Group& group, const std::vector<Tensor>& inputs,
                                 ReduceOp op) override {
    const char* fn = "all_reduce";
    std::lock_guard<std::mutex> lock(mu_);
    agree(group, inputs, describe_all_reduce(inputs.at(0), op), fn);
    return reduce_all(group, inputs, op, fn);
  }

 private:
  // The NCCL all-reduce, with no agreement. Caller holds mu_.
  std::vector<Tensor> reduce_all(const Group& group, const std::vector<Tensor>& inputs, ReduceOp op,
                                 const char* fn) {
    Comms& c = comms_for(group, inputs, fn);
    std::vector<Tensor> out;
    for (const Tensor& in : inputs)
      out.push_back(Tensor::empty(in.shape(), in.dtype(), in.device()));
    run(group, c, fn, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(
          inputs[i].raw_data(), out[i].raw_data(), static_cast<size_t>(inputs[i].num_elements()),
          nccl_type(inputs[i].dtype()), nccl_op(op, inputs[i].dtype()), comm, stream);
    });
    return out;
  }

 public:
  std::vector<Tensor> all_gather(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t axis) override {
    const char* fn = "all_gather";
    std::lock_guard<std::mutex> lock(mu_);
    agree(group, inputs, describe_all_gather(inputs.at(0), axis), fn);
    Comms& c = comms_for(group, inputs, fn);
    const std::vector<Shape> shapes = member_shapes(group, c, inputs, fn);
    Shape shape = inputs[0].shape();
    shape[static_cast<size_t>(axis)] = 0;
    for (const Shape& s : shapes) shape[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    // Every member broadcasts its piece; each piece then lands at its offset along `axis`.
    std::vector<std::vector<Tensor>> pieces(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (const Shape& s : shapes) {
        pieces[i].push_back(Tensor::empty(s, inputs[i].dtype(), inputs[i].device()));
      }
    }
    run(group, c, fn, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
      for (size_t r = 0; r < shapes.size(); ++r) {
        Tensor& piece = pieces[i][r];
        const void* send = static_cast<int>(r) == c.ranks[i] ? inputs[i].raw_data() : nullptr;
        const ncclResult_t rc =
            ncclBroadcast(send, piece.raw_data(), static_cast<size_t>(piece.num_elements()),
                          nccl_type(piece.dtype()), static_cast<int>(r), comm, stream);
        if (rc != ncclSuccess && rc != ncclInProgress) return rc;
      }
      return ncclSuccess;
    });
    std::vector<Tensor> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor o = Tensor::empty(shape, inputs[i].dtype(), inputs[i].device());
      std::vector<int64_t> at(shape.size(), 0);
      for (const Tensor& piece : pieces[i]) {
        copy_box(piece, std::vector<int64_t>(shape.size(), 0), o, at, piece.shape());
        at[static_cast<size_t>(axis)] += piece.dim(axis);
      }
      out.push_back(o);
    }
    return out;
  }

  std::vector<Tensor> reduce_scatter(const Group& group, const std::vector<Tensor>& inputs,
                                     ReduceOp op, int64_t axis) override {
    // An all-reduce, then each member keeps its chunk: uneven chunks need no padding.
    const char* fn = "reduce_scatter";
    std::lock_guard<std::mutex> lock(mu_);
    agree(group, inputs, describe_reduce_scatter(inputs.at(0), op, axis), fn);
    std::vector<Tensor> reduced = reduce_all(group, inputs, op, fn);
    Comms& c = comms_for(group, inputs, fn);
    std::vector<Tensor> out;
    for (size_t i = 0; i < reduced.size(); ++i) {
      const ShardRange r = chunk_range(reduced[i].dim(axis), group.size(), c.ranks[i]);
      std::vector<int64_t> begin(reduced[i].shape().size(), 0);
      begin[static_cast<size_t>(axis)] = r.offset;
      Shape extent = reduced[i].shape();
      extent[static_cast<size_t>(axis)] = r.size;
      out.push_back(slice_box(reduced[i], begin, extent));
    }
    return out;
  }

  std::vector<Tensor> all_to_all(const Group& group, const std::vector<Tensor>& inputs,
                                 int64_t split_axis, int64_t concat_axis) override {
    const char* fn = "all_to_all";
    std::lock_guard<std::mutex> lock(mu_);
    agree(group, inputs, describe_all_to_all(inputs.at(0), split_axis, concat_axis), fn);
    Comms& c = comms_for(group, inputs, fn);
    const std::vector<Shape> shapes = member_shapes(group, c, inputs, fn);
    const int64_t k = group.size();
    auto piece_shape = [&](const Shape& from, int64_t j, ShardRange* range) {
      *range = chunk_range(from[static_cast<size_t>(split_axis)], k, j);
      Shape s = from;
      s[static_cast<size_t>(split_axis)] = range->size;
      return s;
    };
    // Outgoing pieces (contiguous copies) and incoming buffers, per local member.
    std::vector<std::vector<Tensor>> send(inputs.size()), recv(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (int64_t j = 0; j < k; ++j) {
        ShardRange range;
        const Shape s = piece_shape(inputs[i].shape(), j, &range);
        std::vector<int64_t> begin(s.size(), 0);
        begin[static_cast<size_t>(split_axis)] = range.offset;
        send[i].push_back(slice_box(inputs[i], begin, s));
        ShardRange mine;
        recv[i].push_back(
            Tensor::empty(piece_shape(shapes[static_cast<size_t>(j)], c.ranks[i], &mine),
                          inputs[i].dtype(), inputs[i].device()));
      }
    }
    run(group, c, fn, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
      for (int64_t j = 0; j < k; ++j) {
        const Tensor& s = send[i][static_cast<size_t>(j)];
        Tensor& r = recv[i][static_cast<size_t>(j)];
        ncclResult_t rc = ncclSend(s.raw_data(), static_cast<size_t>(s.num_elements()),
                                   nccl_type(s.dtype()), static_cast<int>(j), comm, stream);
        if (rc != ncclSuccess && rc != ncclInProgress) return rc;
        rc = ncclRecv(r.raw_data(), static_cast<size_t>(r.num_elements()), nccl_type(r.dtype()),
                      static_cast<int>(j), comm, stream);
        if (rc != ncclSuccess && rc != ncclInProgress) return rc;
      }
      return ncclSuccess;
    });
    std::vector<Tensor> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Shape shape = recv[i][0].shape();
      shape[static_cast<size_t>(concat_axis)] = 0;
      for (const Tensor& r : recv[i]) {
        shape[static_cast<size_t>(concat_axis)] += r.dim(concat_axis);
      }
      Tensor o = Tensor::empty(shape, inputs[i].dtype(), inputs[i].device());
      std::vector<int64_t> at(shape.size(), 0);
      for (const Tensor& r : recv[i]) {
        copy_box(r, std::vector<int64_t>(shape.size(), 0), o, at, r.shape());
        at[static_cast<size_t>(concat_axis)] += r.dim(concat_axis);
      }
      out.push_back(o);
    }
    return out;
  }

  std::vector<Tensor> broadcast(const Group& group, const std::vector<Tensor>& inputs,
                                int64_t root) override {
    const char* fn = "broadcast";
    std::lock_guard<std::mutex> lock(mu_);
    const std::vector<int64_t> local = group.local_positions();
    const bool root_here = std::find(local.begin(), local.end(), root) != local.end();
    agree(group, inputs, describe_broadcast(root_here ? &inputs.at(0) : nullptr, root), fn);
    Comms& c = comms_for(group, inputs, fn);
    const std::vector<Shape> shapes = member_shapes(group, c, inputs, fn);
    std::vector<Tensor> out;
    for (const Tensor& in : inputs) {
      out.push_back(Tensor::empty(shapes[static_cast<size_t>(root)], in.dtype(), in.device()));
    }
    run(group, c, fn, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(inputs[i].raw_data(), out[i].raw_data(),
                           static_cast<size_t>(out[i].num_elements()), nccl_type(out[i].dtype()),
                           static_cast<int>(root), comm, stream);
    });
    return out;
  }

  void barrier(const Group& group) override {
    std::vector<Tensor> one;
    for (const int64_t position : group.local_positions()) {
      one.push_back(
          Tensor::zeros({1}, DType::kF32,
                        Device{DeviceType::kGPU, group.devices[static_cast<size_t>(position)]}));
    }
    std::lock_guard<std::mutex> lock(mu_);
    agree(group, one, describe_barrier(), "barrier");
    reduce_all(group, one, ReduceOp::kSum, "barrier");
  }

 private:
  // Processes of a group spanning several (one member each) agree on the call over MPI's control
  // channel (runtime/mpi/control_channel.h) before any NCCL call, even the communicators' first
  // creation: a disagreement throws CommunicationError on every process, a process that has left
  // the job is found instead of waited for. Members of one process make one call: nothing to
  // agree on. Caller holds mu_.
  void agree(const Group& group, const std::vector<Tensor>& inputs,
             const CollectiveDescriptor& mine, const char* fn) {
    const std::vector<int64_t> local = group.local_positions();
    // comms_for rejects other shapes of groups.
    if (local.size() != 1 || inputs.size() != 1 || group.size() == 1) return;
    const std::vector<int> processes(group.owners.begin(), group.owners.end());
    const size_t self = static_cast<size_t>(local[0]);
    check_agreement(fn, exchange_descriptors(processes, self, mine, fn), group.owners, self);
  }

  // The communicators of `group`, created on first use. Caller holds mu_.
  Comms& comms_for(const Group& group, const std::vector<Tensor>& inputs, const char* fn) {
    auto it = comms_.find(group.devices);
    if (it != comms_.end()) return it->second;
    const std::vector<int64_t> local = group.local_positions();
    if (local.size() != inputs.size()) {
      throw_error<CommunicationError>(fn,
                                      "the NCCL backend got {} tensors for {} local members of "
                                      "group {}",
                                      inputs.size(), local.size(), group_text(group));
    }
    const bool all_local = static_cast<int64_t>(local.size()) == group.size();
    if (!all_local && local.size() != 1) {
      throw_error<CommunicationError>(fn,
                                      "the NCCL backend takes one member per process or all "
                                      "members in one process, got {} of group {} here",
                                      local.size(), group_text(group));
    }
    Comms c;
    std::vector<int> gpus;
    for (size_t i = 0; i < local.size(); ++i) {
      c.devices.push_back(inputs[i].device());
      c.ranks.push_back(static_cast<int>(local[i]));
      gpus.push_back(cuda::physical_gpu_of(inputs[i].device()));
      for (size_t j = 0; j < i; ++j) {
        if (gpus[j] == gpus[i]) {
          throw_error<CommunicationError>(
              fn,
              "devices {} and {} of group {} are logical devices of one GPU ({}); NCCL needs "
              "one rank per GPU (use the in-process GPU backend for them)",
              device_to_string(c.devices[j]), device_to_string(c.devices[i]), group_text(group),
              gpus[i]);
        }
      }
    }
    ncclUniqueId id;
    if (all_local) {
      check(ncclGetUniqueId(&id), fn, group, nullptr);
    } else {
      exchange_id(group, &id, fn);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    c.comms.assign(local.size(), nullptr);
    // A failed init aborts the communicators made so far (fail), so that no peer waits on them.
    check(ncclGroupStart(), fn, group, nullptr);
    for (size_t i = 0; i < local.size(); ++i) {
      cuda::activate(c.devices[i], fn);
      const ncclResult_t rc = ncclCommInitRankConfig(&c.comms[i], static_cast<int>(group.size()),
                                                     id, c.ranks[i], &config);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        ncclGroupEnd();
        fail(group, c, fn, rc);
      }
    }
    const ncclResult_t rc = ncclGroupEnd();
    if (rc != ncclSuccess && rc != ncclInProgress) fail(group, c, fn, rc);
    wait(group, c, fn, /*streams=*/false);
    return comms_.emplace(group.devices, std::move(c)).first->second;
  }

  // The group's first process creates the id and sends it, with whether that worked, to the
  // others' processes: a first process that fails makes every peer throw instead of waiting.
  // Every MPI call is checked, and every wait is bounded (wait_for_id).
  void exchange_id(const Group& group, ncclUniqueId* id, const char* fn) {
    const int tag = 0x4e43;  // "NC"
    // Heap memory: a wait that gives up leaves it to MPI (see wait_for_id).
    auto message = std::make_unique<IdMessage>();
    const int first = static_cast<int>(group.owners[0]);
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    ncclResult_t created = ncclSuccess;
    if (first == group.self) {
      created = ncclGetUniqueId(&message->id);
      message->ok = created == ncclSuccess ? 1 : 0;
      for (size_t i = 1; i < group.owners.size(); ++i) {
        peers.push_back(static_cast<int>(group.owners[i]));
        requests.emplace_back();
        check_mpi(MPI_Isend(message.get(), sizeof(IdMessage), MPI_BYTE, peers.back(), tag,
                            MPI_COMM_WORLD, &requests.back()),
                  fn, "MPI_Isend");
      }
    } else {
      peers.push_back(first);
      requests.emplace_back();
      check_mpi(MPI_Irecv(message.get(), sizeof(IdMessage), MPI_BYTE, first, tag, MPI_COMM_WORLD,
                          &requests.back()),
                fn, "MPI_Irecv");
    }
    wait_for_id(group, requests, peers, std::move(message), id, fn);
    check(created, fn, group, nullptr);
  }

  struct IdMessage {
    int32_t ok = 0;  // whether the first process created the id
    ncclUniqueId id{};
  };

  // Tests `requests` (the sends to, or the receive from, `peers`) until they complete, then
  // copies the id out; throws CommunicationError when a peer has left the job, when the timeout
  // passes (its requests cancelled and `message` left to MPI), or when the first process could not
  // create the id.
  void wait_for_id(const Group& group, std::vector<MPI_Request>& requests,
                   const std::vector<int>& peers, std::unique_ptr<IdMessage> message,
                   ncclUniqueId* id, const char* fn) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
    std::string why;
    while (why.empty()) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                            MPI_STATUSES_IGNORE),
                fn, "MPI_Testall");
      if (done) break;
      for (int peer : peers) {
        if (why.empty() && has_departed(peer, fn)) {
          why = "process " + std::to_string(peer) + " left the job";
        }
      }
      if (why.empty() && std::chrono::steady_clock::now() > deadline) {
        why = "timed out after " + std::to_string(timeout_seconds()) +
              " s (DTENSOR_NCCL_TIMEOUT sets the limit)";
      }
      std::this_thread::yield();
    }
    if (!why.empty()) {
      for (MPI_Request& r : requests) {
        if (r == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
      message.release();  // MPI may still own it
      throw_error<CommunicationError>(fn, "NCCL id exchange on group {} failed: {}",
                                      group_text(group), why);
    }
    if (message->ok == 0) {
      throw_error<CommunicationError>(fn,
                                      "NCCL failed on group {}: process {} could not create the "
                                      "NCCL id",
                                      group_text(group), group.owners[0]);
    }
    *id = message->id;
  }

  // Every member's shape, in group order (an all-gather of the dims).
  std::vector<Shape> member_shapes(const Group& group, Comms& c, const std::vector<Tensor>& inputs,
                                   const char* fn) {
    const size_t rank = inputs[0].shape().size();
    std::vector<Shape> shapes(static_cast<size_t>(group.size()), Shape(rank));
    if (rank == 0) return shapes;
    std::vector<Tensor> dims, all;
    for (const Tensor& in : inputs) {
      Tensor host = Tensor::empty({static_cast<int64_t>(rank)}, DType::kI64);
      for (size_t d = 0; d < rank; ++d) host.data<int64_t>()[d] = in.shape()[d];
      dims.push_back(cuda::to_device(host, in.device()));
      all.push_back(
          Tensor::empty({group.size() * static_cast<int64_t>(rank)}, DType::kI64, in.device()));
    }
    run(group, c, fn, [&](size_t i, ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(dims[i].raw_data(), all[i].raw_data(), rank, ncclInt64, comm, stream);
    });
    const Tensor host = cuda::to_host(all[0]);
    for (size_t p = 0; p < shapes.size(); ++p) {
      for (size_t d = 0; d < rank; ++d) shapes[p][d] = host.data<int64_t>()[p * rank + d];
    }
    return shapes;
  }

  // Issues issue(i, comm, stream) for every local member inside one NCCL group, then waits.
  template <typename Issue>
  void run(const Group& group, Comms& c, const char* fn, Issue&& issue) {
    check(ncclGroupStart(), fn, group, &c);
    for (size_t i = 0; i < c.comms.size(); ++i) {
      cudaStream_t stream = cuda::activate(c.devices[i], fn);
      const ncclResult_t rc = issue(i, c.comms[i], stream);
      if (rc != ncclSuccess && rc != ncclInProgress) {
        ncclGroupEnd();
        fail(group, c, fn, rc);
      }
    }
    const ncclResult_t rc = ncclGroupEnd();
    if (rc != ncclSuccess && rc != ncclInProgress) fail(group, c, fn, rc);
    wait(group, c, fn, /*streams=*/true);
  }

  // Polls until the communicators are idle (and, with `streams`, the streams done), an error is
  // reported, or the timeout passes.
  void wait(const Group& group, Comms& c, const char* fn, bool streams) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds());
    while (true) {
      bool done = true;
      for (size_t i = 0; i < c.comms.size(); ++i) {
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(c.comms[i], &state);
        if (state == ncclInProgress) {
          done = false;
        } else if (state != ncclSuccess) {
          fail(group, c, fn, state);
        }
        if (streams && done) {
          cuda::activate(c.devices[i], fn);
          const cudaError_t q = cudaStreamQuery(cuda::activate(c.devices[i], fn));
          if (q == cudaErrorNotReady) {
            done = false;
          } else if (q != cudaSuccess) {
            fail_message(group, c, fn, cudaGetErrorString(q));
          }
        }
      }
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        fail_message(group, c, fn,
                     "timed out after " + std::to_string(timeout_seconds()) +
                         " s (a peer did not join; DTENSOR_NCCL_TIMEOUT sets the limit)");
      }
      std::this_thread::yield();
    }
  }

  void check(ncclResult_t rc, const char* fn, const Group& group, Comms* c) {
    if (rc == ncclSuccess) return;
    if (c != nullptr) fail(group, *c, fn, rc);
    throw_error<CommunicationError>(fn, "NCCL failed on group {}: {}", group_text(group),
                                    ncclGetErrorString(rc));
  }

  [[noreturn]] void fail(const Group& group, Comms& c, const char* fn, ncclResult_t rc) {
    fail_message(group, c, fn, ncclGetErrorString(rc));
  }

  // Aborts the group's communicators so that no peer waits forever, forgets them, and throws.
  [[noreturn]] void fail_message(const Group& group, Comms& c, const char* fn,
                                 const std::string& why) {
    for (ncclComm_t comm : c.comms) {
      if (comm != nullptr) ncclCommAbort(comm);
    }
    comms_.erase(group.devices);
    throw_error<CommunicationError>(fn, "NCCL failed on group {}: {}", group_text(group), why);
  }

  std::mutex mu_;
  std::map<std::vector<int64_t>, Comms> comms_;
};

}  // namespace

std::shared_ptr<CollectiveBackend> make_nccl_backend() { return std::make_shared<NcclBackend>(); }

void register_nccl_gpu_backends() {
  register_collective_backends(DeviceType::kGPU, cuda::make_gpu_in_process_backend(),
                               this_process().count > 1 ? make_nccl_backend() : nullptr);
}

}  // namespace dtensor
