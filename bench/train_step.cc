// Median training-step time (forward, backward, Adam) of the seed MLP (784-700-500-10) at global
// batch 128, for the meshes batch=1, batch=8 and batch=2,model=4, measured in one run.
#include <chrono>
#include <string>

#include "bench/report.h"
#include "dtensor/creation.h"
#include "dtensor/optim/optimizers.h"
#include "examples/mnist/model.h"
#include "ops/autograd.h"
#include "ops/ops.h"

// With an argument, only that mesh (for profiling): train_step batch=8
int main(int argc, char** argv) {
  using namespace dtensor;
  for (const char* spec : {"batch=1", "batch=8", "batch=2,model=4"}) {
    if (argc > 1 && std::string(argv[1]) != spec) continue;
    Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU);
    examples::Mlp model(mesh, {784, 700, 500, 10}, 22);
    std::vector<DVariable> vars = model.variables();
    Adam optimizer(1e-3);
    DTensor x = random_uniform({128, 784}, model.batch_layout(2), 1);
    DTensor labels =
        cast(scale(random_uniform({128}, model.batch_layout(1), 2), 9.99), DType::kI32);
    auto step = [&] {
      GradientTape tape;
      for (const DVariable& v : vars) tape.watch(v);
      DTensor loss = reduce_mean(sparse_softmax_cross_entropy(model(x), labels));
      optimizer.apply(vars, tape.gradient(loss, vars));
    };
    double t = bench::median_seconds(step, 30, 5);
    std::printf("{\"bench\":\"train_step\",\"mesh\":\"%s\",\"median_ms\":%.4g}\n", spec, t * 1e3);
    std::fflush(stdout);
  }
}
