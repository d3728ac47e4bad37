// Checkpoints of DVariables and Adam slots on emulated-GPU meshes: saved from a GPU mesh and
// restored into GPU and CPU meshes of other shapes and layouts, and from a CPU mesh into a GPU
// mesh, bit for bit. The checkpoint code must move shard bytes through the kernel front's copies:
// a host read of a GPU shard crashes here.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "dtensor/creation.h"
#include "dtensor/variable.h"
#include "dtensor/virtual_devices.h"
#include "kernels/gpu/gpu_kernels.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"
#include "train/optim/optimizers.h"

using namespace dtensor;

namespace {

std::string fresh_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

Tensor host_global(const DTensor& t) {
  const Tensor g = to_global(t);
  return g.device().type == DeviceType::kGPU ? kernels::gpu::copy_to_host(g) : g;
}

std::vector<Layout> layouts_of(const Mesh& mesh) {
  std::vector<Layout> out = {Layout::replicated(mesh, 2)};
  for (const MeshDim& d : mesh.dims()) {
    out.push_back(Layout({d.name, "unsharded"}, mesh));
    out.push_back(Layout({"unsharded", d.name}, mesh));
  }
  return out;
}

}  // namespace

TEST_CASE("variables round trip between emulated-GPU and CPU meshes, uneven dims included") {
  configure_virtual_cpus(8);
  const Mesh gpu24 = create_mesh("batch=2,model=4", DeviceType::kGPU);
  const Mesh gpu8 = create_mesh("batch=8", DeviceType::kGPU);
  const Mesh cpu8 = create_mesh("batch=8");
  const Layout cpu_any = Layout::replicated(cpu8, 2);
  const Tensor expected = host_global(random_uniform({13, 7}, cpu_any, 5, -1, 1));
  std::vector<Layout> targets = layouts_of(gpu8);
  for (const Layout& l : layouts_of(cpu8)) targets.push_back(l);
  std::vector<Layout> sources = layouts_of(gpu24);
  sources.push_back(cpu_any);
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string path = fresh_path("ckpt-" + std::to_string(i));
    {
      DVariable w(random_uniform({13, 7}, sources[i], 5, -1, 1), "w");
      Checkpoint c;
      c.add_variable("w", w);
      c.save(path);
    }
    for (const Layout& to : targets) {
      INFO(sources[i].to_string() << " -> " << to.to_string());
      DVariable r(zeros({13, 7}, to), "w");
      Checkpoint c;
      c.add_variable("w", r);
      c.restore(path);
      CHECK(r.value().layout() == to);
      CHECK(bitwise_equal(host_global(r.value()), expected));
    }
  }
}

TEST_CASE("Adam slots saved on an emulated-GPU mesh resume training bit for bit") {
  configure_virtual_cpus(8);
  const Mesh mesh = create_mesh("batch=8", DeviceType::kGPU);
  const Layout rows = Layout::batch_sharded(mesh, "batch", 2);
  const DTensor x = random_uniform({16, 6}, rows, 1, -1, 1);
  auto step = [&](DVariable& w, Adam& adam) {
    GradientTape tape;
    tape.watch(w);
    DTensor loss = reduce_mean(square(matmul(x, w.value())));
    adam.apply({w}, tape.gradient(loss, std::vector<DVariable>{w}));
  };
  DVariable w(random_uniform({6, 3}, Layout::replicated(mesh, 2), 2, -1, 1), "w");
  Adam adam(0.05);
  step(w, adam);
  const std::string path = fresh_path("adam");
  {
    Checkpoint c;
    c.add_variable("w", w);
    c.add_optimizer("adam", adam, {w});
    c.save(path);
  }
  step(w, adam);
  DVariable resumed(zeros({6, 3}, Layout::replicated(mesh, 2)), "w");
  Adam fresh(0.05);
  Checkpoint c;
  c.add_variable("w", resumed);
  c.add_optimizer("adam", fresh, {resumed});
  c.restore(path);
  step(resumed, fresh);
  CHECK(bitwise_equal(host_global(resumed.value()), host_global(w.value())));
}
