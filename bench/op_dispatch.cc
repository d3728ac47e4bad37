// Per-op overhead of the SPMD layer: a chain of 10,000 tiny elementwise ops on an 8-device mesh
// with the sharding and relayout caches warm, run eagerly and as a captured step
// (dtensor::function: traced once, then replayed without dispatch), next to the same chain of
// local kernels on one tensor (the arithmetic alone).
#include "bench/report.h"
#include "cli/flags.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "train/capture/function.h"

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("op_dispatch",
                            "Per-op overhead of the SPMD expansion on 8 devices. Prints one JSON "
                            "object per measurement.");
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  using namespace dtensor;
  constexpr int kOps = 10000;
  Mesh mesh = Mesh::create({{"batch", 8}}, DeviceType::kCPU);
  for (auto [name, layout] :
       {std::pair<const char*, Layout>{"batch_sharded", Layout::batch_sharded(mesh, "batch", 2)},
        std::pair<const char*, Layout>{"replicated", Layout::replicated(mesh, 2)}}) {
    DTensor x = distribute(Tensor::zeros({8, 4}, DType::kF32), layout);
    double t = bench::median_seconds(
        [&] {
          DTensor y = x;
          for (int i = 0; i < kOps; ++i) y = (i % 2 == 0) ? add(y, x) : relu(y);
          bench::do_not_optimize(y);
        },
        9);
    bench::report("op_dispatch",
                  {{"layout", std::string(name)},
                   {"mode", std::string("eager")},
                   {"devices", int64_t{8}},
                   {"ops", int64_t{kOps}}},
                  t / kOps * 1e6, "us/op");
    Function chain = function([](const std::vector<DTensor>& a) {
      DTensor y = a[0];
      for (int i = 0; i < kOps; ++i) y = (i % 2 == 0) ? add(y, a[0]) : relu(y);
      return std::vector<DTensor>{y};
    });
    chain({x});  // traces
    double replay = bench::median_seconds([&] { bench::do_not_optimize(chain({x})); }, 9);
    // How many of the ops replay inside fused elementwise segments (train/capture/segment.h).
    const int64_t fused = static_cast<int64_t>(chain.fused_calls({x}));
    bench::report("op_dispatch",
                  {{"layout", std::string(name)},
                   {"mode", std::string("captured")},
                   {"devices", int64_t{8}},
                   {"ops", int64_t{kOps}},
                   {"fused_ops", fused}},
                  replay / kOps * 1e6, "us/op");
  }
  Tensor local = Tensor::zeros({1, 4}, DType::kF32);
  double t = bench::median_seconds(
      [&] {
        Tensor y = local;
        for (int i = 0; i < kOps; ++i) {
          y = (i % 2 == 0) ? kernels::binary(kernels::BinaryOp::kAdd, y, local)
                           : kernels::unary(kernels::UnaryOp::kRelu, y);
        }
        bench::do_not_optimize(y);
      },
      9);
  bench::report("op_dispatch",
                {{"layout", std::string("local_kernel_only")},
                 {"mode", std::string("kernel")},
                 {"devices", int64_t{1}},
                 {"ops", int64_t{kOps}}},
                t / kOps * 1e6, "us/op");
}
