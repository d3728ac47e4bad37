// A small built-in image set for running examples/cifar10:train without data files: 32x32x3
// images in [0, 1] (CIFAR-10's size and scale, so the tutorial's augmentation applies unchanged)
// in 10 classes, each class a striped pattern with its own orientation, frequency and colour,
// at a random phase, under noise. Learnable, not trivial: a CNN separates the classes within a
// few epochs, a linear model does worse.
//
// Deterministic: example i of (n, seed) is the same on every machine and every run.
#pragma once

#include <cstdint>
#include <memory>

#include "train/data/example_source.h"

namespace dtensor::examples {

// n examples as an in-memory source (labels cycle through 0..9 in a seeded order).
std::shared_ptr<const data::ExampleSource> synthetic_images(int64_t n, uint64_t seed);

}  // namespace dtensor::examples
