#include "ops/seed_generator.h"

#include "dtensor/creation.h"

namespace dtensor {

SeedGenerator::SeedGenerator(const Mesh& mesh, int64_t seed, const std::string& name)
    : state_(fill({}, Layout::replicated(mesh, 0), static_cast<double>(seed), DType::kI64), name) {}

DTensor SeedGenerator::next() {
  DTensor seed = state_.value();
  state_.assign_add(ones({}, state_.layout(), DType::kI64));
  return seed;
}

}  // namespace dtensor
