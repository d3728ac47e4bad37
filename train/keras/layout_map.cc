#include "train/keras/layout_map.h"

#include <regex>

#include "fmt/format.h"
#include "runtime/error.h"

namespace dtensor::keras {

namespace {

thread_local const LayoutMap* current_map = nullptr;

}  // namespace

void LayoutMap::set(std::string pattern, std::vector<std::string> sharding_specs) {
  try {
    std::regex check(pattern);
  } catch (const std::regex_error& e) {
    throw_error<InvalidArgumentError>("LayoutMap::set", "'{}' is not a regex: {}", pattern,
                                      e.what());
  }
  for (auto& [key, specs] : entries_) {
    if (key == pattern) {
      specs = std::move(sharding_specs);
      return;
    }
  }
  entries_.emplace_back(std::move(pattern), std::move(sharding_specs));
}

std::optional<std::vector<std::string>> LayoutMap::find(const std::string& path) const {
  for (const auto& [key, specs] : entries_) {
    if (key == path) return specs;
  }
  std::vector<const std::pair<std::string, std::vector<std::string>>*> found;
  for (const auto& entry : entries_) {
    if (std::regex_search(path, std::regex(entry.first))) found.push_back(&entry);
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    throw_error<InvalidArgumentError>("LayoutMap", "variable '{}' matches '{}' and '{}'", path,
                                      found[0]->first, found[1]->first);
  }
  return found[0]->second;
}

void LayoutMap::scope(const std::function<void()>& build) const {
  struct Restore {
    const LayoutMap* outer;
    ~Restore() { current_map = outer; }
  } restore{current_map};
  current_map = this;
  build();
}

Layout variable_layout(const std::string& path, const Shape& shape, const Mesh& mesh) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::optional<std::vector<std::string>> specs;
  if (current_map != nullptr) specs = current_map->find(path);
  if (!specs) return Layout::replicated(mesh, rank);
  const std::string shown = fmt::format("[{}]", fmt::join(*specs, ","));
  if (static_cast<int64_t>(specs->size()) != rank) {
    throw_error<LayoutError>("LayoutMap", "variable '{}' of shape [{}] gets layout {} of {} dims",
                             path, fmt::join(shape, ","), shown, specs->size());
  }
  try {
    return Layout(*specs, mesh);
  } catch (const LayoutError& e) {
    throw_error<LayoutError>("LayoutMap", "variable '{}' of shape [{}]: layout {} on mesh {}: {}",
                             path, fmt::join(shape, ","), shown, mesh.dims_string(), e.what());
  }
}

}  // namespace dtensor::keras
