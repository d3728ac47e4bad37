// Causal attention, composed (scaled_dot_product_attention: matmul, mask, softmax, matmul, with
// the [T, T] scores per head) against fused (fused_attention: blockwise, online softmax), forward
// and forward + backward, on one device and on data=8 virtual devices (batch sharded), at the
// example's shape (batch 16, 4 heads, context 64, head size 32) and at longer contexts. The two
// take turns for --rounds rounds; each round's time is the median of a few calls, and the
// reported figure is the median over rounds ("attention", milliseconds). Also reports the bytes
// of the score matrix the composed op makes per device ("attention_scores").
#include <algorithm>
#include <string>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "ops/autograd.h"
#include "ops/ops.h"

namespace {

using namespace dtensor;
using Attention = DTensor (*)(const DTensor&, const DTensor&, const DTensor&, bool);

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 7;
  dtensor::cli::Flags flags("attention",
                            "Composed vs fused causal attention, forward and backward.");
  flags.add_int("--rounds", &rounds, "interleaved timing rounds", 1);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const std::vector<std::pair<std::string, Attention>> ops = {
      {"composed", &scaled_dot_product_attention}, {"fused", &fused_attention}};
  for (const std::string spec : {"data=1", "data=8"}) {
    const Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU);
    for (const int64_t context : {64, 256}) {
      const Layout layout = Layout::batch_sharded(mesh, "data", 4);
      const Shape shape = {16, 4, context, 32};
      const DTensor q = random_uniform(shape, layout, 1, -1, 1);
      const DTensor k = random_uniform(shape, layout, 2, -1, 1);
      const DTensor v = random_uniform(shape, layout, 3, -1, 1);
      const std::vector<dtensor::bench::Field> where = {
          {"mesh", spec}, {"shape", "16x4x" + std::to_string(context) + "x32"}};
      dtensor::bench::report("attention_scores", where,
                             4.0 * 16 * 4 * context * context / mesh.num_devices(), "bytes");
      std::vector<std::vector<double>> seconds(2 * ops.size());
      for (int64_t r = 0; r < rounds; ++r) {
        for (size_t o = 0; o < ops.size(); ++o) {
          Attention attend = ops[o].second;
          seconds[2 * o].push_back(dtensor::bench::median_seconds(
              [&] { dtensor::bench::do_not_optimize(attend(q, k, v, true)); }, 3, 1));
          seconds[2 * o + 1].push_back(dtensor::bench::median_seconds(
              [&] {
                GradientTape tape;
                for (const DTensor* x : {&q, &k, &v}) tape.watch(*x);
                DTensor loss = reduce_sum(attend(q, k, v, true));
                dtensor::bench::do_not_optimize(tape.gradient(loss, std::vector<DTensor>{q, k, v}));
              },
              3, 1));
        }
      }
      for (size_t o = 0; o < ops.size(); ++o) {
        for (int pass = 0; pass < 2; ++pass) {
          std::vector<dtensor::bench::Field> p = where;
          p.insert(p.end(),
                   {{"op", ops[o].first}, {"pass", pass == 0 ? "forward" : "forward+backward"}});
          dtensor::bench::report("attention", p, 1e3 * median(seconds[2 * o + pass]), "ms");
        }
      }
    }
  }
  return 0;
}
