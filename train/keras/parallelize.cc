#include "train/keras/parallelize.h"

#include <map>
#include <optional>

#include "fmt/format.h"
#include "runtime/error.h"

namespace dtensor::keras {

namespace {

constexpr const char* kFn = "parallelize";

// Every layer under `layer` with its path, parents before children.
void collect(Layer& layer, const std::string& prefix,
             std::vector<std::pair<std::string, Layer*>>& out) {
  for (Layer* child : layer.sublayers()) {
    const std::string path = prefix.empty() ? child->name() : prefix + "/" + child->name();
    for (const auto& [seen, _] : out) {
      if (seen == path)
        throw_error<InvalidArgumentError>(kFn, "two layers have the path '{}'", path);
    }
    out.emplace_back(path, child);
    collect(*child, path, out);
  }
}

bool has_wildcard(const std::string& key) { return key.find_first_of("*?") != std::string::npos; }

}  // namespace

bool path_matches(const std::string& pattern, const std::string& path) {
  // Recursive over the (short) pattern: `*` takes 0, 1, 2, ... characters short of a '/'.
  struct Matcher {
    const std::string& pattern;
    const std::string& path;
    bool at(size_t p, size_t s) const {
      if (p == pattern.size()) return s == path.size();
      if (pattern[p] == '*') {
        for (size_t t = s;; ++t) {
          if (at(p + 1, t)) return true;
          if (t == path.size() || path[t] == '/') return false;
        }
      }
      if (s == path.size()) return false;
      const bool one = pattern[p] == '?' ? path[s] != '/' : pattern[p] == path[s];
      return one && at(p + 1, s + 1);
    }
  };
  return Matcher{pattern, path}.at(0, 0);
}

void parallelize(Layer& root, const Mesh& mesh, const ParallelizePlan& plan) {
  std::vector<std::pair<std::string, Layer*>> layers;
  collect(root, "", layers);
  std::vector<std::string> paths;
  for (const auto& [path, _] : layers) paths.push_back(path);
  // The entry each layer takes: its exact path, else the one pattern that matches it.
  std::map<Layer*, size_t> chosen;
  std::vector<bool> used(plan.size(), false);
  for (const auto& [path, layer] : layers) {
    std::optional<size_t> exact;
    std::vector<size_t> patterns;
    for (size_t i = 0; i < plan.size(); ++i) {
      if (plan[i].first == path) exact = i;
      if (has_wildcard(plan[i].first) && path_matches(plan[i].first, path)) patterns.push_back(i);
    }
    for (size_t i : patterns) used[i] = true;
    if (!exact && patterns.size() > 1) {
      throw_error<InvalidArgumentError>(kFn, "layer '{}' matches both '{}' and '{}'", path,
                                        plan[patterns[0]].first, plan[patterns[1]].first);
    }
    if (exact) used[*exact] = true;
    if (exact || !patterns.empty()) chosen[layer] = exact ? *exact : patterns[0];
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    if (!used[i]) {
      throw_error<InvalidArgumentError>(kFn, "no layer of {} '{}' matches '{}' (layers: {})",
                                        root.kind(), root.name(), plan[i].first,
                                        fmt::join(paths, ", "));
    }
  }
  for (const auto& [path, layer] : layers) {
    if (auto it = chosen.find(layer); it != chosen.end()) {
      layer->check_style(plan[it->second].second, mesh, kFn);
    }
  }
  for (const auto& [path, layer] : layers) {
    if (auto it = chosen.find(layer); it != chosen.end()) {
      layer->apply_style(plan[it->second].second, mesh);
    }
  }
}

void parallelize(Layer& layer, const Mesh& mesh, const ParallelStyle& style) {
  layer.check_style(style, mesh, kFn);
  layer.apply_style(style, mesh);
}

}  // namespace dtensor::keras
