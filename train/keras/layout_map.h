// LayoutMap: the layouts of variables by path, given before the model is built (Keras's
// keras.dtensor.experimental.LayoutMap / keras.distribution.LayoutMap).
//
//   keras::LayoutMap layout_map;
//   layout_map.set("fc1/kernel", {"unsharded", "model"});  // exact path
//   layout_map.set(".*/bias", {"unsharded"});               // a regex, searched in the path
//   std::optional<keras::Sequential> model;
//   layout_map.scope([&] {
//     model.emplace(16, std::vector<keras::Dense>{keras::Dense(32, relu, "fc1"),
//                                                 keras::Dense(16, {}, "fc2")});
//   });
//
// A layer building a variable inside the scope asks variable_layout(): the map's entry for the
// variable's path (an exact key first, else the one pattern std::regex_search finds in it, as
// Keras does; several is an error), on the mesh of the current strategy; replicated without one.
// Unlike a parallel style (parallelize.h), a map only places variables: ops then decide the
// activations' layouts and collectives from them.
//
// A LayoutMap is a plain value; its scope is the calling thread's only.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "layout/layout.h"

namespace dtensor::keras {

class LayoutMap {
 public:
  // One sharding spec (a mesh dim or "unsharded") per dim of the variables `pattern` matches.
  // InvalidArgumentError naming "LayoutMap::set" for a pattern that is not a valid regex.
  void set(std::string pattern, std::vector<std::string> sharding_specs);
  // The specs for `path`, or none. InvalidArgumentError naming "LayoutMap" when more than one
  // pattern matches and none exactly.
  std::optional<std::vector<std::string>> find(const std::string& path) const;

  // Runs `build` with this map current on the calling thread (Keras's `with layout_map.scope()`);
  // scopes nest, the innermost map applies.
  void scope(const std::function<void()>& build) const;

 private:
  std::vector<std::pair<std::string, std::vector<std::string>>> entries_;
};

// The layout of a new variable `path` of `shape` on `mesh`: the current LayoutMap's entry for it,
// or replicated. LayoutError naming "LayoutMap" when the entry does not fit (rank, mesh dims).
Layout variable_layout(const std::string& path, const Shape& shape, const Mesh& mesh);

}  // namespace dtensor::keras
