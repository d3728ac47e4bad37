// The embedding of a real vocabulary: the vocab-parallel masked gather and scatter-add
// (ops::embedding) against the one-hot product it replaced (one_hot(ids) [tokens, V] x table
// [V, D], written here with the public ops as ops/transformer.cc wrote it before), forward and
// forward + backward (the table's gradient), on one device, with the table sharded over model=2,
// and on data=2,model=2 with the ids' batch over data. Each round times every case (the median of a
// few calls); the reported figure is the median over --rounds interleaved rounds ("embedding",
// milliseconds). Then the peak memory of one forward + backward of each case over the resting set
// ("embedding_peak", bytes: the temporaries, the one-hot matrix included).
#include <algorithm>
#include <string>
#include <vector>

#include "bench/peak_memory.h"
#include "bench/report.h"
#include "cli/flags.h"
#include "dtensor/creation.h"
#include "dtensor/relayout.h"
#include "ops/autograd.h"
#include "ops/ops.h"

namespace {

using namespace dtensor;
using Embedding = DTensor (*)(const DTensor&, const DTensor&);

DTensor one_hot_product(const DTensor& table, const DTensor& ids) {
  return matmul(one_hot(ids, table.shape()[0], table.dtype()), table);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rounds = 5, vocab = 32768, dim = 512, batch = 8, seq = 512;
  dtensor::cli::Flags flags(
      "embedding", "Vocab-parallel embedding vs the one-hot product, forward and backward.");
  flags.add_int("--rounds", &rounds, "interleaved timing rounds", 1);
  flags.add_int("--vocab", &vocab, "rows of the table", 1);
  flags.add_int("--dim", &dim, "columns of the table", 1);
  flags.add_int("--batch", &batch, "rows of ids", 1);
  flags.add_int("--seq", &seq, "columns of ids (tokens = batch x seq)", 1);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  const std::vector<std::pair<std::string, Embedding>> ops = {{"one_hot", &one_hot_product},
                                                              {"vocab_parallel", &embedding}};
  for (const std::string spec : {"model=1", "model=2", "data=2,model=2"}) {
    const Mesh mesh = Mesh::create(parse_mesh_dims(spec), DeviceType::kCPU);
    // The batch over data where the mesh has it (the table's gradient is then a partial sum over
    // data, chunked across the devices), else replicated ids.
    const Layout ids_layout =
        mesh.has_dim("data") ? Layout::batch_sharded(mesh, "data", 2) : Layout::replicated(mesh, 2);
    const DTensor table =
        random_uniform({vocab, dim}, Layout::batch_sharded(mesh, "model", 2), 1, -1, 1);
    const DTensor ids = cast(
        scale(random_uniform({batch, seq}, ids_layout, 2, 0, 1), static_cast<double>(vocab) - 0.01),
        DType::kI32);
    const std::vector<dtensor::bench::Field> where = {
        {"mesh", spec}, {"vocab", vocab}, {"dim", dim}, {"tokens", batch * seq}};
    auto forward = [&](Embedding embed) {
      dtensor::bench::do_not_optimize(relayout(embed(table, ids), Layout::replicated(mesh, 3)));
    };
    auto forward_backward = [&](Embedding embed) {
      GradientTape tape;
      tape.watch(table);
      const DTensor y = embed(table, ids);
      dtensor::bench::do_not_optimize(relayout(tape.gradient(y, {table})[0], table.layout()));
    };
    std::vector<std::vector<double>> seconds(2 * ops.size());
    for (int64_t r = 0; r < rounds; ++r) {
      for (size_t o = 0; o < ops.size(); ++o) {
        seconds[2 * o].push_back(
            dtensor::bench::median_seconds([&] { forward(ops[o].second); }, 3, 1));
        seconds[2 * o + 1].push_back(
            dtensor::bench::median_seconds([&] { forward_backward(ops[o].second); }, 3, 1));
      }
    }
    for (size_t o = 0; o < ops.size(); ++o) {
      for (int pass = 0; pass < 2; ++pass) {
        std::vector<dtensor::bench::Field> p = where;
        p.insert(p.end(),
                 {{"op", ops[o].first}, {"pass", pass == 0 ? "forward" : "forward+backward"}});
        dtensor::bench::report("embedding", p, 1e3 * median(seconds[2 * o + pass]), "ms");
      }
    }
    for (const auto& [name, embed] : ops) {
      std::vector<dtensor::bench::Field> p = where;
      p.push_back({"op", name});
      dtensor::bench::report(
          "embedding_peak", p,
          dtensor::bench::step_peak_bytes([&, embed = embed] { forward_backward(embed); }),
          "bytes");
    }
  }
  return 0;
}
