// SeedGenerator: a stream of seeds for stateless random ops such as dropout (ops/ops.h), the
// counterpart of keras.random.SeedGenerator (or of a JAX key folded with the step number). Its
// state is a DVariable (an i64 scalar, replicated): next() reads it and advances it, through the
// variable's traced read and update, so a captured step (train/capture/function.h) that draws
// from it advances it on every replay and each step gets a fresh seed, the one eager code would
// get on the same step. Seeds are base, base + 1, base + 2, ...; Philox streams of different keys
// are independent.
//
// A handle: copies share the state. The state variable can be checkpointed (state()) so that a
// resumed run draws the masks it would have drawn. Thread-safety: as DVariable; concurrent next()
// calls may return the same seed.
#pragma once

#include <cstdint>
#include <string>

#include "dtensor/variable.h"

namespace dtensor {

class SeedGenerator {
 public:
  // `seed` must be a whole number below 2^53 in magnitude (InvalidArgumentError naming "fill").
  SeedGenerator(const Mesh& mesh, int64_t seed, const std::string& name = "seed_generator");

  // The current seed (i64 scalar, replicated on the mesh); advances the state by one.
  DTensor next();
  const DVariable& state() const { return state_; }

 private:
  DVariable state_;
};

}  // namespace dtensor
