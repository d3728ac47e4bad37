// One set of collective cases run against every backend, each output compared with a reference
// computed here, element by element, from deterministic global data:
//   - in one process, the in-process backend (meshes owned by this process);
//   - in one process, processes emulated by threads ("[local]": the threaded double of
//     runtime/threaded_processes_backend.h composed by the hierarchical backend, 2 and 4 of them);
//   - under mpirun -np 2 and -np 4, the in-process backend composed with MPI.
// Cases: every collective; sum, max and min; f32, f64, bf16, i32, i64 and bool; uneven sizes
// with empty chunks; NaN through max and min; meshes {8}, {2,4}, {4,2}, {2,2,2}, {P,3} and {P}
// (one device per process) with groups along every subset of dims, so groups that span
// processes and groups that stay in one; a group whose members interleave processes; and the
// collective counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <thread>

#include "dtensor/collectives.h"
#include "runtime/backend_registry.h"
#include "runtime/process.h"
#include "runtime/threaded_processes_backend.h"

using namespace dtensor;

namespace {

// A host copy of a tensor as doubles: the reference side, independent of runtime/block.h.
struct Host {
  Shape shape;
  std::vector<double> v;
};

const DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16,
                         DType::kI32, DType::kI64, DType::kBool};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16; }

// Small integers: sums of up to 12 members stay exact in bf16.
double value(int64_t device, int64_t element, int salt, DType dtype) {
  const int64_t x = (device * 7 + element * 3 + salt * 5) % 16;
  return dtype == DType::kBool ? static_cast<double>(x % 2) : static_cast<double>(x);
}

Host host_data(const Shape& shape, int64_t device, int salt, DType dtype) {
  Host h{shape, std::vector<double>(static_cast<size_t>(num_elements(shape)))};
  for (size_t e = 0; e < h.v.size(); ++e) {
    h.v[e] = value(device, static_cast<int64_t>(e), salt, dtype);
  }
  return h;
}

Tensor to_tensor(const Host& h, DType dtype, int64_t device) {
  Tensor t = Tensor::empty(h.shape, dtype, Device{DeviceType::kCPU, device});
  for (size_t e = 0; e < h.v.size(); ++e) {
    const double x = h.v[e];
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[e] = static_cast<float>(x);
        break;
      case DType::kF64:
        t.data<double>()[e] = x;
        break;
      case DType::kBF16:
        t.data<BFloat16>()[e] = BFloat16(static_cast<float>(x));
        break;
      case DType::kI32:
        t.data<int32_t>()[e] = static_cast<int32_t>(x);
        break;
      case DType::kI64:
        t.data<int64_t>()[e] = static_cast<int64_t>(x);
        break;
      case DType::kBool:
        t.data<bool>()[e] = x != 0;
        break;
    }
  }
  return t;
}

Host to_host(const Tensor& t) {
  Host h{t.shape(), std::vector<double>(static_cast<size_t>(t.num_elements()))};
  for (size_t e = 0; e < h.v.size(); ++e) {
    switch (t.dtype()) {
      case DType::kF32:
        h.v[e] = t.data<float>()[e];
        break;
      case DType::kF64:
        h.v[e] = t.data<double>()[e];
        break;
      case DType::kBF16:
        h.v[e] = static_cast<float>(t.data<BFloat16>()[e]);
        break;
      case DType::kI32:
        h.v[e] = t.data<int32_t>()[e];
        break;
      case DType::kI64:
        h.v[e] = static_cast<double>(t.data<int64_t>()[e]);
        break;
      case DType::kBool:
        h.v[e] = t.data<bool>()[e] ? 1 : 0;
        break;
    }
  }
  return h;
}

bool same(const Host& a, const Host& b) {
  if (a.shape != b.shape) return false;
  for (size_t e = 0; e < a.v.size(); ++e) {
    if (std::isnan(a.v[e]) != std::isnan(b.v[e])) return false;
    if (!std::isnan(a.v[e]) && a.v[e] != b.v[e]) return false;
  }
  return true;
}

struct Chunk {
  int64_t offset, size;
};
Chunk chunk(int64_t n, int64_t k, int64_t j) {
  const int64_t c = (n + k - 1) / k;
  const int64_t offset = std::min(j * c, n);
  return {offset, std::min(c, n - offset)};
}

// Rank-2 reference operations.
Host slice(const Host& h, int64_t axis, Chunk c) {
  Host out{h.shape, {}};
  out.shape[static_cast<size_t>(axis)] = c.size;
  for (int64_t r = 0; r < out.shape[0]; ++r) {
    for (int64_t col = 0; col < out.shape[1]; ++col) {
      const int64_t sr = axis == 0 ? r + c.offset : r, sc = axis == 1 ? col + c.offset : col;
      out.v.push_back(h.v[static_cast<size_t>(sr * h.shape[1] + sc)]);
    }
  }
  return out;
}

Host concat(const std::vector<Host>& parts, int64_t axis) {
  Host out{parts[0].shape, {}};
  int64_t total = 0;
  for (const Host& p : parts) total += p.shape[static_cast<size_t>(axis)];
  out.shape[static_cast<size_t>(axis)] = total;
  out.v.assign(static_cast<size_t>(num_elements(out.shape)), 0);
  int64_t offset = 0;
  for (const Host& p : parts) {
    for (int64_t r = 0; r < p.shape[0]; ++r) {
      for (int64_t c = 0; c < p.shape[1]; ++c) {
        const int64_t dr = axis == 0 ? r + offset : r, dc = axis == 1 ? c + offset : c;
        out.v[static_cast<size_t>(dr * out.shape[1] + dc)] =
            p.v[static_cast<size_t>(r * p.shape[1] + c)];
      }
    }
    offset += p.shape[static_cast<size_t>(axis)];
  }
  return out;
}

Host reduce(const std::vector<Host>& parts, ReduceOp op, DType dtype) {
  Host out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    for (size_t e = 0; e < out.v.size(); ++e) {
      double& a = out.v[e];
      const double b = parts[i].v[e];
      if (std::isnan(a) || std::isnan(b)) {
        a = NAN;
      } else if (dtype == DType::kBool) {
        a = op == ReduceOp::kMin ? (a != 0 && b != 0) : (a != 0 || b != 0);
      } else if (op == ReduceOp::kSum) {
        a += b;
      } else {
        a = op == ReduceOp::kMax ? std::max(a, b) : std::min(a, b);
      }
    }
  }
  return out;
}

// Runs the cases on one process of `processes`, collecting mismatches as messages (threads may
// not assert). Every process makes the same collective calls whatever it finds.
class Conformance {
 public:
  Conformance(int64_t process, int64_t processes, bool check_counts)
      : process_(process), processes_(processes), check_counts_(check_counts) {}

  std::vector<std::string> run() {
    const std::vector<std::vector<MeshDim>> meshes = {
        {{"x", 8}},
        {{"x", 2}, {"y", 4}},
        {{"x", 4}, {"y", 2}},
        {{"x", 2}, {"y", 2}, {"z", 2}},
        {{"p", processes_}, {"y", 3}},
        {{"p", processes_}},
    };
    for (const auto& dims : meshes) {
      Mesh mesh = Mesh::create(dims, DeviceType::kCPU, process_, processes_);
      for (MeshDimMask mask = 1; mask < (MeshDimMask{1} << mesh.rank()); ++mask) {
        run_mesh_cases(mesh, mask);
      }
      barrier(mesh);
    }
    run_interleaved_group();
    return failures_;
  }

 private:
  using Shapes = std::function<Shape(int64_t position)>;

  // Every device's input, indexed by global id.
  std::vector<Host> inputs(const Mesh& mesh, MeshDimMask mask, const Shapes& shape_at, int salt,
                           DType dtype) {
    std::vector<Host> all;
    for (int64_t d = 0; d < mesh.num_devices(); ++d) {
      all.push_back(host_data(shape_at(mesh.index_in_group(d, mask)), d, salt, dtype));
    }
    return all;
  }

  std::vector<Tensor> local(const Mesh& mesh, const std::vector<Host>& all, DType dtype) {
    std::vector<Tensor> out;
    for (int64_t d : mesh.local_device_ids()) {
      out.push_back(to_tensor(all[static_cast<size_t>(d)], dtype, d));
    }
    return out;
  }

  // Compares every local output with expected(group members' inputs, position in group).
  void compare(const Mesh& mesh, MeshDimMask mask, const std::vector<Host>& all,
               const std::vector<Tensor>& out,
               const std::function<Host(const std::vector<Host>&, int64_t)>& expected,
               const std::string& what) {
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t d = mesh.local_device_ids()[i];
      std::vector<Host> members;
      for (int64_t m : mesh.group(d, mask)) members.push_back(all[static_cast<size_t>(m)]);
      if (out[i].device().id != d) {
        fail(mesh, mask, what, d, "wrong device " + device_to_string(out[i].device()));
      } else if (!same(to_host(out[i]), expected(members, mesh.index_in_group(d, mask)))) {
        fail(mesh, mask, what, d, "wrong values or shape " + out[i].to_string());
      }
    }
  }

  void fail(const Mesh& mesh, MeshDimMask mask, const std::string& what, int64_t device,
            const std::string& why) {
    failures_.push_back(fmt::format("process {}/{} mesh {} mask {} {}: device {}: {}", process_,
                                    processes_, mesh.dims_string(), mask, what, device, why));
  }

  // Counts one call of `kind` when the group has more than one member.
  template <typename Call>
  std::vector<Tensor> counted(const Mesh& mesh, MeshDimMask mask, CollectiveKind kind,
                              const std::string& what, Call&& call) {
    const int64_t before = collective_stats().count(kind);
    std::vector<Tensor> out = call();
    const int64_t expected = mesh.group_size(mask) > 1 ? 1 : 0;
    if (check_counts_ && collective_stats().count(kind) - before != expected) {
      failures_.push_back(fmt::format("mesh {} mask {} {}: counted {} calls, expected {}",
                                      mesh.dims_string(), mask, what,
                                      collective_stats().count(kind) - before, expected));
    }
    return out;
  }

  void run_mesh_cases(const Mesh& mesh, MeshDimMask mask) {
    const int64_t k = mesh.group_size(mask);
    for (DType dtype : kDTypes) {
      const std::string type(dtype_name(dtype));
      // all_reduce and reduce_scatter: equal shapes, k+1 rows (chunks uneven, some empty).
      for (ReduceOp op : kOps) {
        const std::string name(reduce_op_name(op));
        auto rows = inputs(
            mesh, mask,
            [&](int64_t) {
              return Shape{k + 1, 3};
            },
            1, dtype);
        auto out = counted(mesh, mask, CollectiveKind::kAllReduce, "all_reduce",
                           [&] { return all_reduce(mesh, mask, local(mesh, rows, dtype), op); });
        compare(
            mesh, mask, rows, out,
            [&](const std::vector<Host>& m, int64_t) { return reduce(m, op, dtype); },
            "all_reduce " + name + " " + type);
        for (int64_t axis : {0, 1}) {
          auto in = inputs(
              mesh, mask,
              [&](int64_t) {
                return axis == 0 ? Shape{k + 1, 3} : Shape{2, k + 1};
              },
              2, dtype);
          auto scattered =
              counted(mesh, mask, CollectiveKind::kReduceScatter, "reduce_scatter",
                      [&] { return reduce_scatter(mesh, mask, local(mesh, in, dtype), op, axis); });
          compare(
              mesh, mask, in, scattered,
              [&](const std::vector<Host>& m, int64_t j) {
                return slice(reduce(m, op, dtype), axis, chunk(k + 1, k, j));
              },
              fmt::format("reduce_scatter {} {} axis {}", name, type, axis));
        }
      }
      if (is_float(dtype)) run_nan_cases(mesh, mask, dtype);
      // all_gather-v: member j holds j % 3 rows (or columns), some none.
      for (int64_t axis : {0, 1}) {
        auto in = inputs(
            mesh, mask,
            [&](int64_t j) {
              return axis == 0 ? Shape{j % 3, 2} : Shape{2, j % 3};
            },
            3, dtype);
        auto out = counted(mesh, mask, CollectiveKind::kAllGather, "all_gather",
                           [&] { return all_gather(mesh, mask, local(mesh, in, dtype), axis); });
        compare(
            mesh, mask, in, out,
            [&](const std::vector<Host>& m, int64_t) { return concat(m, axis); },
            fmt::format("all_gather {} axis {}", type, axis));
      }
      // all_to_all-v: uneven chunks along split_axis, member sizes varying along concat_axis.
      for (auto [split, cat] : {std::pair<int64_t, int64_t>{1, 0}, {0, 1}, {0, 0}, {1, 1}}) {
        auto shape_at = [&, split = split, cat = cat](int64_t i) {
          Shape s{2, 2};
          s[static_cast<size_t>(split)] = k + 1 + (split == cat ? i % 2 : 0);
          if (split != cat) s[static_cast<size_t>(cat)] = i % 2 + 1;
          return s;
        };
        auto in = inputs(mesh, mask, shape_at, 4, dtype);
        auto out = counted(mesh, mask, CollectiveKind::kAllToAll, "all_to_all", [&] {
          return all_to_all(mesh, mask, local(mesh, in, dtype), split, cat);
        });
        compare(
            mesh, mask, in, out,
            [&, split = split, cat = cat](const std::vector<Host>& m, int64_t j) {
              std::vector<Host> pieces;
              for (const Host& h : m) {
                pieces.push_back(slice(h, split, chunk(h.shape[static_cast<size_t>(split)], k, j)));
              }
              return concat(pieces, cat);
            },
            fmt::format("all_to_all {} split {} concat {}", type, split, cat));
      }
      for (int64_t root : {int64_t{0}, k - 1}) {
        auto in = inputs(
            mesh, mask,
            [&](int64_t) {
              return Shape{2, 3};
            },
            5, dtype);
        auto out = counted(mesh, mask, CollectiveKind::kBroadcast, "broadcast",
                           [&] { return broadcast(mesh, mask, local(mesh, in, dtype), root); });
        compare(
            mesh, mask, in, out,
            [&](const std::vector<Host>& m, int64_t) { return m[static_cast<size_t>(root)]; },
            fmt::format("broadcast {} root {}", type, root));
      }
    }
  }

  // A NaN in the last member (element 1) and in the first (element 4) survives max and min.
  void run_nan_cases(const Mesh& mesh, MeshDimMask mask, DType dtype) {
    const int64_t k = mesh.group_size(mask);
    auto in = inputs(
        mesh, mask,
        [&](int64_t) {
          return Shape{2, 3};
        },
        6, dtype);
    for (int64_t d = 0; d < mesh.num_devices(); ++d) {
      const int64_t j = mesh.index_in_group(d, mask);
      if (j == k - 1) in[static_cast<size_t>(d)].v[1] = NAN;
      if (j == 0) in[static_cast<size_t>(d)].v[4] = NAN;
    }
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
      auto out = all_reduce(mesh, mask, local(mesh, in, dtype), op);
      compare(
          mesh, mask, in, out,
          [&](const std::vector<Host>& m, int64_t) { return reduce(m, op, dtype); },
          fmt::format("all_reduce NaN {} {}", reduce_op_name(op), dtype_name(dtype)));
      auto scattered = reduce_scatter(mesh, mask, local(mesh, in, dtype), op, 1);
      compare(
          mesh, mask, in, scattered,
          [&](const std::vector<Host>& m, int64_t j) {
            return slice(reduce(m, op, dtype), 1, chunk(3, k, j));
          },
          fmt::format("reduce_scatter NaN {} {}", reduce_op_name(op), dtype_name(dtype)));
    }
  }

  // A group given to the backend directly, its members interleaving processes (device ids in
  // the order 0, L, 2L, ..., 1, L+1, ...): the general paths of the hierarchical backend.
  void run_interleaved_group() {
    Mesh mesh = Mesh::create({{"x", 8}}, DeviceType::kCPU, process_, processes_);
    const int64_t per = mesh.num_local_devices();
    Group group{{}, {}, process_};
    for (int64_t i = 0; i < per; ++i) {
      for (int64_t p = 0; p < processes_; ++p) {
        group.devices.push_back(p * per + i);
        group.owners.push_back(p);
      }
    }
    const int64_t k = group.size();
    CollectiveBackend& backend = collective_backend_for(mesh);
    for (DType dtype : {DType::kF32, DType::kI64, DType::kBF16}) {
      // Inputs by group position; this process's members in group order.
      auto make = [&](const Shapes& shape_at, int salt) {
        std::vector<Host> all;
        for (int64_t j = 0; j < k; ++j) {
          all.push_back(host_data(shape_at(j), group.devices[static_cast<size_t>(j)], salt, dtype));
        }
        return all;
      };
      auto mine = [&](const std::vector<Host>& all) {
        std::vector<Tensor> out;
        for (int64_t j : group.local_positions()) {
          out.push_back(
              to_tensor(all[static_cast<size_t>(j)], dtype, group.devices[static_cast<size_t>(j)]));
        }
        return out;
      };
      auto check = [&](const std::vector<Tensor>& out, const std::function<Host(int64_t)>& expected,
                       const std::string& what) {
        std::vector<int64_t> positions = group.local_positions();
        for (size_t i = 0; i < out.size(); ++i) {
          if (!same(to_host(out[i]), expected(positions[i]))) {
            failures_.push_back(fmt::format("process {}/{} interleaved group {} {}: position {}",
                                            process_, processes_, what, dtype_name(dtype),
                                            positions[i]));
          }
        }
      };
      auto rows = make([&](int64_t) { return Shape{k + 1, 2}; }, 7);
      for (ReduceOp op : kOps) {
        check(
            backend.all_reduce(group, mine(rows), op),
            [&](int64_t) { return reduce(rows, op, dtype); }, "all_reduce");
        check(
            backend.reduce_scatter(group, mine(rows), op, 0),
            [&](int64_t j) { return slice(reduce(rows, op, dtype), 0, chunk(k + 1, k, j)); },
            "reduce_scatter");
      }
      auto uneven = make([&](int64_t j) { return Shape{j % 3, 2}; }, 8);
      check(
          backend.all_gather(group, mine(uneven), 0), [&](int64_t) { return concat(uneven, 0); },
          "all_gather");
      auto grid = make([&](int64_t j) { return Shape{j % 2 + 1, k + 1}; }, 9);
      check(
          backend.all_to_all(group, mine(grid), 1, 0),
          [&](int64_t j) {
            std::vector<Host> pieces;
            for (const Host& h : grid) pieces.push_back(slice(h, 1, chunk(k + 1, k, j)));
            return concat(pieces, 0);
          },
          "all_to_all");
      check(
          backend.broadcast(group, mine(rows), 1), [&](int64_t) { return rows[1]; }, "broadcast");
      backend.barrier(group);
    }
  }

  const int64_t process_, processes_;
  const bool check_counts_;
  std::vector<std::string> failures_;
};

std::string joined(const std::vector<std::string>& failures) {
  std::string s;
  for (size_t i = 0; i < failures.size() && i < 20; ++i) s += failures[i] + "\n";
  return s;
}

}  // namespace

TEST_CASE("collectives conform on this process's backend (in-process, or MPI under mpirun)") {
  const ProcessInfo p = this_process();
  std::vector<std::string> failures = Conformance(p.index, p.count, /*check_counts=*/true).run();
  INFO(joined(failures));
  CHECK(failures.empty());
}

TEST_CASE("collectives conform on processes emulated by threads", "[local]") {
  register_collective_backends(DeviceType::kCPU, make_in_process_backend(),
                               make_threaded_processes_backend());
  for (int64_t processes : {2, 4}) {
    std::vector<std::vector<std::string>> failures(static_cast<size_t>(processes));
    std::vector<std::thread> threads;
    for (int64_t p = 0; p < processes; ++p) {
      threads.emplace_back([&, p] {
        try {
          failures[static_cast<size_t>(p)] = Conformance(p, processes, false).run();
        } catch (const std::exception& e) {
          failures[static_cast<size_t>(p)].push_back(e.what());
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const auto& f : failures) {
      INFO(processes << " processes: " << joined(f));
      CHECK(f.empty());
    }
  }
  reset_collective_backends();
}

TEST_CASE("flat backends refuse groups with several members in one process", "[local]") {
  auto flat = make_threaded_processes_backend(1);
  Group group{{0, 1, 2, 3}, {0, 0, 1, 1}, 0};
  Tensor t = Tensor::zeros({2}, DType::kF32);
  CHECK_THROWS_WITH(flat->all_reduce(group, {t, t}, ReduceOp::kSum),
                    "[all_reduce] the threaded-processes backend takes one member per process, "
                    "but process 0 owns devices 0 and 1 of the group; compose it with an "
                    "intra-process backend (make_hierarchical_backend)");
  Group one_each{{0, 2}, {0, 1}, 0};
  CHECK_THROWS_WITH(flat->all_gather(one_each, {t, t}, 0),
                    "[all_gather] the threaded-processes backend takes one tensor per process, "
                    "got 2");
  // Nobody else arrives: the wait ends with an error instead of a hang.
  CHECK_THROWS_WITH(flat->broadcast(one_each, {t}, 0),
                    "[broadcast] process 0 waited more than 1s for the other processes of its "
                    "group");
}
