// Times load_mnist (and synthetic_digits) and prints what was loaded.
//
//   tools/bazel run //bench:load_mnist_bench -- IMAGES LABELS [--offset=N --limit=N]
//   tools/bazel run //bench:load_mnist_bench -- --synthetic N
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "train/data/idx.h"

namespace {

template <typename Fn>
double best_ms(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  return best;
}

void describe(const dtensor::data::MnistSplit& split) {
  const int64_t n = split.labels.dim(0);
  std::vector<int64_t> counts(256, 0);
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(split.labels.data<int32_t>()[i])];
  double sum = 0;
  const float* x = split.images.data<float>();
  for (int64_t i = 0; i < split.images.num_elements(); ++i) sum += x[i];
  fmt::print("images {}, labels {}, mean pixel {:.4f}\nlabel counts:", split.images.to_string(),
             split.labels.to_string(),
             n > 0 ? sum / static_cast<double>(split.images.num_elements()) : 0.0);
  for (int c = 0; c < 10; ++c) fmt::print(" {}:{}", c, counts[static_cast<size_t>(c)]);
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtensor::data;
  int64_t synthetic = 0, offset = 0, limit = -1;
  std::vector<std::string> files;
  dtensor::cli::Flags flags("load_mnist_bench",
                            "Times load_mnist (and synthetic_digits) and prints what was loaded.");
  flags.add_positional("files", &files, "IMAGES LABELS: the two IDX files (raw or .gz)");
  flags.add_int("--offset", &offset, "first example loaded", 0);
  flags.add_int("--limit", &limit, "examples loaded (-1: all)", -1);
  flags.add_int("--synthetic", &synthetic, "time synthetic_digits(N) instead of files (0: off)", 0);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  try {
    if (synthetic > 0) {
      MnistSplit split;
      const double ms = best_ms(3, [&] { split = synthetic_digits(synthetic, 1); });
      fmt::print("synthetic_digits({}): {:.1f} ms\n", synthetic, ms);
      describe(split);
      return 0;
    }
    if (files.size() != 2) {
      fmt::print(stderr, "load_mnist_bench: expected IMAGES LABELS, got {} files\n{}", files.size(),
                 flags.help());
      return 2;
    }
    MnistSplit split;
    const double read_ms = best_ms(1, [&] { read_idx(files[0]); });
    const double ms = best_ms(5, [&] { split = load_mnist(files[0], files[1], offset, limit); });
    fmt::print("read_idx(images), first call: {:.1f} ms\nload_mnist, best of 5: {:.1f} ms\n",
               read_ms, ms);
    describe(split);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
