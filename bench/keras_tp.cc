// Per-layer tensor parallelism on a Keras MLP (train/keras/parallelize.h): two colwise/rowwise
// pairs (Dense 256 -> 1024 relu -> 256, twice) on inputs [16, 64, 256], a captured Adam step
// of mean((model(x) - y)^2). For each mesh and placement, the collectives one replayed step runs
// ("keras_tp_calls", "keras_tp_bytes", per kind and mesh dims) and the median step time over
// interleaved rounds ("keras_tp_step"). Placements: "replicated" (no split), "styles" (the
// Colwise/Rowwise plan), "layout_map" (the same variable layouts from a LayoutMap, the ops left
// to choose the activations' layouts).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"
#include "train/capture/function.h"
#include "train/keras/layers.h"
#include "train/keras/layout_map.h"
#include "train/keras/parallelize.h"
#include "train/keras/strategy.h"
#include "train/optim/optimizers.h"

namespace {

using namespace dtensor;
using namespace dtensor::keras;

constexpr int64_t kBatch = 16, kSeq = 64, kDim = 256, kHidden = 1024;

Sequential make_mlp(const Mesh& mesh) {
  MirroredStrategy strategy(mesh, mesh.dims()[0].name);
  auto scope = strategy.scope();
  return Sequential(kDim,
                    {Dense(kHidden, relu, "fc1"), Dense(kDim, {}, "fc2"),
                     Dense(kHidden, relu, "fc3"), Dense(kDim, {}, "fc4")},
                    3);
}

// The model, its optimizer, batch and captured step under one placement.
struct Setup {
  Setup(const Mesh& mesh, const std::string& placement)
      : model([&] {
          if (placement != "layout_map") return make_mlp(mesh);
          LayoutMap map;
          map.set("fc[13]/kernel", {"unsharded", "model"});
          map.set("fc[13]/bias", {"model"});
          map.set("fc[24]/kernel", {"model", "unsharded"});
          std::optional<Sequential> built;
          map.scope([&] { built.emplace(make_mlp(mesh)); });
          return *built;
        }()),
        adam(1e-3) {
    if (placement == "styles") {
      parallelize(model, mesh,
                  {{"fc1", ColwiseParallel()},
                   {"fc2", RowwiseParallel()},
                   {"fc3", ColwiseParallel()},
                   {"fc4", RowwiseParallel()}});
    }
    const Layout rows =
        mesh.has_dim("data") ? Layout::batch_sharded(mesh, "data", 3) : Layout::replicated(mesh, 3);
    x = random_uniform({kBatch, kSeq, kDim}, rows, 1, -1, 1);
    y = random_uniform({kBatch, kSeq, kDim}, rows, 2, -1, 1);
    step = std::make_unique<Function>([this](const std::vector<DTensor>&) {
      const std::vector<DVariable> vars = model.variables();
      GradientTape tape;
      for (const DVariable& v : vars) tape.watch(v);
      const DTensor loss = reduce_mean(square(sub(model.call(*x, true), *y)));
      adam.apply(vars, tape.gradient(loss, vars));
      return std::vector<DTensor>{loss};
    });
  }
  Sequential model;
  Adam adam;
  std::optional<DTensor> x, y;
  std::unique_ptr<Function> step;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 7, steps = 3;
  dtensor::cli::Flags flags("keras_tp",
                            "Collectives and step time of a Keras MLP split per layer (styles) "
                            "or by a LayoutMap, against replicated.");
  flags.add_int("--rounds", &rounds, "interleaved timing rounds", 1);
  flags.add_int("--steps", &steps, "timed steps per round (their median is the round's)", 1);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  struct Named {
    std::string mesh, placement;
    std::unique_ptr<Setup> setup;
    std::vector<double> ms;
  };
  std::vector<Named> runs;
  for (const std::string spec : {"model=2", "model=4", "data=2,model=2"}) {
    const Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU);
    for (const std::string placement : {"replicated", "styles", "layout_map"}) {
      runs.push_back({spec, placement, std::make_unique<Setup>(mesh, placement), {}});
    }
  }
  for (Named& r : runs) {
    (*r.setup->step)({});  // traces
    const CollectiveSummary summary = r.setup->step->collective_summary({});
    for (const CollectiveSummary::Row& row : summary.rows) {
      const std::vector<dtensor::bench::Field> p = {
          {"mesh", r.mesh},
          {"placement", r.placement},
          {"kind", std::string(collective_kind_name(row.kind))},
          {"dims", row.dims}};
      dtensor::bench::report("keras_tp_calls", p, static_cast<double>(row.calls), "calls");
      dtensor::bench::report("keras_tp_bytes", p, static_cast<double>(row.bytes), "B");
    }
  }
  for (int64_t round = 0; round < rounds; ++round) {
    for (Named& r : runs) {
      r.ms.push_back(1e3 * dtensor::bench::median_seconds([&] { (*r.setup->step)({}); },
                                                          static_cast<int>(steps), 1));
    }
  }
  for (Named& r : runs) {
    std::sort(r.ms.begin(), r.ms.end());
    dtensor::bench::report("keras_tp_step", {{"mesh", r.mesh}, {"placement", r.placement}},
                           r.ms[r.ms.size() / 2], "ms");
  }
  return 0;
}
