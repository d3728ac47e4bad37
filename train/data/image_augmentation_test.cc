#include "train/data/image_augmentation.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "train/data/dataset.h"

using namespace dtensor;
using namespace dtensor::data;
using Catch::Message;

namespace {

// An [h, w, c] image whose value at (y, x, ch) is 100y + 10x + ch: a value names its position.
std::vector<float> positional(int64_t h, int64_t w, int64_t c) {
  std::vector<float> image;
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t ch = 0; ch < c; ++ch) image.push_back(static_cast<float>(100 * y + 10 * x + ch));
    }
  }
  return image;
}

std::vector<float> run(const ImageAugmentation& aug, const Shape& shape,
                       const std::vector<float>& image, int64_t example, int64_t epoch = 0) {
  std::vector<float> out(static_cast<size_t>(num_elements(aug.output_shape(shape))));
  aug.apply(shape, image.data(), 1, &example, epoch, out.data());
  return out;
}

// (x - mean) / max(stddev, 1/sqrt(N)), straight from the definition.
std::vector<double> standardized(const std::vector<float>& x) {
  const double n = static_cast<double>(x.size());
  double mean = 0, var = 0;
  for (float v : x) mean += v / n;
  for (float v : x) var += (v - mean) * (v - mean) / n;
  const double adjusted = std::max(std::sqrt(var), 1 / std::sqrt(n));
  std::vector<double> out;
  for (float v : x) out.push_back((v - mean) / adjusted);
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
}

}  // namespace

TEST_CASE("central_crop takes the middle window, rounding the offset down") {
  const std::vector<float> image = positional(5, 6, 2);
  ImageAugmentation aug;
  aug.central_crop(3, 3);
  CHECK(aug.output_shape({5, 6, 2}) == Shape{3, 3, 2});
  const std::vector<float> out = run(aug, {5, 6, 2}, image, 0);
  // Offsets (5 - 3) / 2 = 1 and (6 - 3) / 2 = 1.
  std::vector<float> want;
  for (int64_t y = 1; y < 4; ++y) {
    for (int64_t x = 1; x < 4; ++x) {
      for (int64_t ch = 0; ch < 2; ++ch) want.push_back(static_cast<float>(100 * y + 10 * x + ch));
    }
  }
  CHECK(out == want);
}

TEST_CASE("the CIFAR-10 evaluation pipeline is a central 24x24 crop, then standardisation") {
  std::vector<float> image(32 * 32 * 3);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<float>((i * 37) % 256) / 255.0f;
  const std::vector<float> out = run(cifar10_eval_augmentation(), {32, 32, 3}, image, 9);
  std::vector<float> crop;
  for (int64_t y = 4; y < 28; ++y) {
    for (int64_t x = 4; x < 28; ++x) {
      for (int64_t ch = 0; ch < 3; ++ch)
        crop.push_back(image[static_cast<size_t>((y * 32 + x) * 3 + ch)]);
    }
  }
  check_close(out, standardized(crop));
}

TEST_CASE("standardize matches the formula, a flat image included") {
  const std::vector<float> image = {0.5f, 2.0f, -1.0f, 4.0f, 0.0f, 3.0f};
  ImageAugmentation aug;
  aug.standardize();
  check_close(run(aug, {1, 2, 3}, image, 0), standardized(image));
  // stddev 0: divided by 1/sqrt(N) instead, so all zeros.
  CHECK(run(aug, {2, 2, 1}, {0.3f, 0.3f, 0.3f, 0.3f}, 0) == std::vector<float>(4, 0.0f));
}

TEST_CASE("random_crop takes windows at every offset, the same for the same example") {
  const std::vector<float> image = positional(6, 7, 1);
  ImageAugmentation aug(11);
  aug.random_crop(3, 4);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t example = 0; example < 300; ++example) {
    const std::vector<float> out = run(aug, {6, 7, 1}, image, example);
    REQUIRE(out.size() == 12);
    const auto top = static_cast<int64_t>(out[0]) / 100,
               left = static_cast<int64_t>(out[0]) % 100 / 10;
    REQUIRE(top <= 3);
    REQUIRE(left <= 3);
    for (int64_t y = 0; y < 3; ++y) {
      for (int64_t x = 0; x < 4; ++x) {
        REQUIRE(out[static_cast<size_t>(y * 4 + x)] == 100 * (top + y) + 10 * (left + x));
      }
    }
    offsets.insert({top, left});
    CHECK(run(aug, {6, 7, 1}, image, example) == out);
  }
  CHECK(offsets.size() == 16);
  // Another epoch or seed draws other offsets.
  int64_t moved_epoch = 0, moved_seed = 0;
  for (int64_t example = 0; example < 20; ++example) {
    moved_epoch += run(aug, {6, 7, 1}, image, example, 1) != run(aug, {6, 7, 1}, image, example);
    moved_seed += run(ImageAugmentation(12).random_crop(3, 4), {6, 7, 1}, image, example) !=
                  run(aug, {6, 7, 1}, image, example);
  }
  CHECK(moved_epoch > 10);
  CHECK(moved_seed > 10);
}

TEST_CASE("random_flip_left_right mirrors the columns of about half the examples") {
  const std::vector<float> image = positional(2, 3, 2);
  std::vector<float> mirrored;
  for (int64_t y = 0; y < 2; ++y) {
    for (int64_t x = 2; x >= 0; --x) {
      for (int64_t ch = 0; ch < 2; ++ch)
        mirrored.push_back(static_cast<float>(100 * y + 10 * x + ch));
    }
  }
  ImageAugmentation aug(3);
  aug.random_flip_left_right();
  int64_t flipped = 0;
  for (int64_t example = 0; example < 200; ++example) {
    const std::vector<float> out = run(aug, {2, 3, 2}, image, example);
    REQUIRE((out == image || out == mirrored));
    flipped += out == mirrored;
  }
  CHECK(flipped > 70);
  CHECK(flipped < 130);
}

TEST_CASE("random_brightness adds one delta within the bound to every value") {
  const std::vector<float> image = positional(3, 3, 3);
  ImageAugmentation aug(5);
  aug.random_brightness(0.25f);
  std::set<float> deltas;
  for (int64_t example = 0; example < 50; ++example) {
    const std::vector<float> out = run(aug, {3, 3, 3}, image, example);
    const float delta = out[0] - image[0];
    CHECK(std::abs(delta) <= 0.25f);
    for (size_t i = 0; i < out.size(); ++i)
      REQUIRE(out[i] - image[i] == Approx(delta).margin(1e-4));
    deltas.insert(delta);
  }
  CHECK(deltas.size() > 40);
}

TEST_CASE("random_contrast scales every channel about its mean by one factor") {
  const std::vector<float> image = {0, 10, 1, 20, 3, 40, 5, 80};  // [2, 2, 2]
  const double mean[2] = {9.0 / 4, 150.0 / 4};
  ImageAugmentation aug(8);
  aug.random_contrast(0.2f, 1.8f);
  for (int64_t example = 0; example < 50; ++example) {
    const std::vector<float> out = run(aug, {2, 2, 2}, image, example);
    const double factor = (out[6] - mean[0]) / (image[6] - mean[0]);
    CHECK(factor >= 0.2 - 1e-6);
    CHECK(factor < 1.8 + 1e-6);
    for (size_t i = 0; i < out.size(); ++i) {
      REQUIRE(out[i] == Approx((image[i] - mean[i % 2]) * factor + mean[i % 2]).margin(1e-4));
    }
  }
}

TEST_CASE("ImageAugmentation rejects bad stages and images they do not fit") {
  ImageAugmentation aug;
  CHECK_THROWS_MATCHES(aug.random_crop(0, 24), InvalidArgumentError,
                       Message("[ImageAugmentation::random_crop] size 0x24 must be at least 1x1"));
  CHECK_THROWS_MATCHES(
      aug.central_crop(24, -1), InvalidArgumentError,
      Message("[ImageAugmentation::central_crop] size 24x-1 must be at least 1x1"));
  CHECK_THROWS_MATCHES(
      aug.random_brightness(-0.5f), InvalidArgumentError,
      Message(
          "[ImageAugmentation::random_brightness] max_delta -0.5 must be finite and at least 0"));
  CHECK_THROWS_MATCHES(aug.random_contrast(1.5f, 0.5f), InvalidArgumentError,
                       Message("[ImageAugmentation::random_contrast] range [1.5, 0.5) needs finite "
                               "0 <= lower <= upper"));
  CHECK(aug.empty());

  const ImageAugmentation train = cifar10_train_augmentation(1);
  CHECK(train.output_shape({32, 32, 3}) == Shape{24, 24, 3});
  CHECK_THROWS_MATCHES(train.output_shape({32, 20, 3}), ShapeError,
                       Message("[ImageAugmentation::output_shape] stage 0 (random_crop 24x24) "
                               "does not fit image [32,20,3]"));
  CHECK_THROWS_MATCHES(train.output_shape({3072}), ShapeError,
                       Message("[ImageAugmentation::output_shape] image shape [3072] is not "
                               "[height, width, channels]"));
  ImageAugmentation twice;
  twice.central_crop(8, 8).standardize().random_crop(9, 4);
  CHECK_THROWS_MATCHES(twice.output_shape({10, 10, 1}), ShapeError,
                       Message("[ImageAugmentation::output_shape] stage 2 (random_crop 9x4) does "
                               "not fit image [8,8,1]"));
  std::vector<float> in(16), out(16);
  const int64_t example = 0;
  CHECK_THROWS_MATCHES(train.apply({4, 4, 1}, in.data(), 1, &example, 0, out.data()), ShapeError,
                       Message("[ImageAugmentation::apply] stage 0 (random_crop 24x24) does not "
                               "fit image [4,4,1]"));

  Mesh mesh = Mesh::create({{"batch", 2}}, DeviceType::kCPU);
  Dataset flat(Tensor::zeros({4, 784}, DType::kF32), Tensor::zeros({4}, DType::kI32), mesh,
               "batch");
  CHECK_THROWS_MATCHES(flat.augment(train), ShapeError,
                       Message("[Dataset::augment] image shape [784] is not [height, width, "
                               "channels]"));
  Dataset small(Tensor::zeros({4, 16, 16, 3}, DType::kF32), Tensor::zeros({4}, DType::kI32), mesh,
                "batch");
  CHECK_THROWS_MATCHES(small.augment(train), ShapeError,
                       Message("[Dataset::augment] stage 0 (random_crop 24x24) does not fit image "
                               "[16,16,3]"));
}

namespace {

// n images [32, 32, 3] with distinct values and labels i % 10.
std::pair<Tensor, Tensor> cifar_like(int64_t n) {
  Tensor x = Tensor::empty({n, 32, 32, 3}, DType::kF32), y = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n * 3072; ++i)
    x.data<float>()[i] = static_cast<float>((i * 31) % 257) / 256.0f;
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  return {x, y};
}

std::vector<std::pair<Tensor, Tensor>> drain(Dataset& ds) {
  std::vector<std::pair<Tensor, Tensor>> out;
  while (auto b = ds.next()) out.push_back({to_global(b->features), to_global(b->labels)});
  return out;
}

}  // namespace

TEST_CASE("augmented batches are the same on every mesh and in every Dataset") {
  const auto data = cifar_like(21);
  const Tensor x = data.first, y = data.second;
  auto make = [&](const Mesh& mesh, int64_t prefetch) {
    Dataset ds(x, y, mesh, "batch");
    ds.batch(8).shuffle(4).repeat(2).prefetch(prefetch).augment(cifar10_train_augmentation(7));
    return ds;
  };
  Dataset one = make(Mesh::create({{"batch", 1}}, DeviceType::kCPU), 0);
  Dataset eight = make(Mesh::create({{"batch", 8}}, DeviceType::kCPU), 2);
  Dataset again = make(Mesh::create({{"batch", 8}}, DeviceType::kCPU), 0);
  const auto a = drain(one), b = drain(eight), c = drain(again);
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  REQUIRE(c.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].first.shape() == Shape{i % 3 == 2 ? 5 : 8, 24, 24, 3});
    CHECK(bitwise_equal(a[i].first, b[i].first));
    CHECK(bitwise_equal(a[i].second, b[i].second));
    CHECK(bitwise_equal(a[i].first, c[i].first));
  }

  // Each row is its example's augmentation for (seed, epoch, example index), wherever it ran.
  const ImageAugmentation aug = cifar10_train_augmentation(7);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    // The epoch's order, from a dataset whose labels are the example ids.
    Tensor order_labels = Tensor::empty({21}, DType::kI32);
    for (int32_t i = 0; i < 21; ++i) order_labels.data<int32_t>()[i] = i;
    Dataset order(Tensor::zeros({21, 1}, DType::kF32), order_labels,
                  Mesh::create({{"batch", 1}}, DeviceType::kCPU), "batch");
    order.batch(21).shuffle(4).repeat(2).restore({epoch, 0});
    const std::optional<Batch> visit_batch = order.next();
    REQUIRE(visit_batch);
    const Tensor visit = to_global(visit_batch->labels);
    std::vector<float> want(24 * 24 * 3);
    for (int64_t r = 0; r < 21; ++r) {
      const int64_t example = visit.data<int32_t>()[r];
      aug.apply({32, 32, 3}, x.data<float>() + example * 3072, 1, &example, epoch, want.data());
      const Tensor& got = a[static_cast<size_t>(epoch * 3 + r / 8)].first;
      const float* row = got.data<float>() + (r % 8) * 24 * 24 * 3;
      REQUIRE(std::vector<float>(row, row + want.size()) == want);
    }
  }
  // Epochs differ: the same example is augmented afresh.
  CHECK_FALSE(bitwise_equal(a[0].first, a[3].first));

  // Removing the augmentation restores the raw examples.
  Dataset raw(x, y, Mesh::create({{"batch", 2}}, DeviceType::kCPU), "batch");
  raw.batch(21).augment(cifar10_train_augmentation(7)).augment(ImageAugmentation());
  CHECK(bitwise_equal(to_global(raw.next()->features), x));
}
