// CheckpointManager: numbered checkpoints in one directory, keep-last-K.
#include <algorithm>
#include <cctype>
#include <random>

#include "dtensor/step_observer.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/internal/file_io.h"
#include "train/checkpoint/internal/in_trace.h"

namespace dtensor {

using namespace checkpoint_internal;

namespace {

constexpr const char* kPrefix = "ckpt-";

std::optional<int64_t> parse_step(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::stoll(digits);
}

bool is_leftover(const std::string& name) {
  return name.compare(0, 5, kPrefix) == 0 && name.find(".tmp-") != std::string::npos;
}

}  // namespace

std::optional<int64_t> checkpoint_step(const std::string& path) {
  const std::string p = strip_trailing_slashes(path);
  const size_t slash = p.rfind('/');
  return parse_step(slash == std::string::npos ? p : p.substr(slash + 1));
}

CheckpointManager::CheckpointManager(Checkpoint& checkpoint, std::string directory,
                                     int64_t max_to_keep)
    : checkpoint_(checkpoint),
      directory_(strip_trailing_slashes(directory)),
      max_to_keep_(max_to_keep) {
  const char* fn = "CheckpointManager";
  if (max_to_keep < 1) {
    throw_error<InvalidArgumentError>(fn, "max_to_keep must be >= 1, got {}", max_to_keep);
  }
  if (directory_.empty()) throw_error<InvalidArgumentError>(fn, "the directory is empty");
  make_directories(directory_, fn);
}

std::vector<std::pair<int64_t, std::string>> CheckpointManager::complete() const {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& name : list_directory(directory_, "CheckpointManager")) {
    std::optional<int64_t> step = parse_step(name);
    if (!step) continue;
    std::string path = join_path(directory_, name);
    if (is_complete_checkpoint(path)) out.emplace_back(*step, std::move(path));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CheckpointManager::save(int64_t step) {
  const char* fn = "CheckpointManager::save";
  reject_in_trace(fn, kSaveInTraceReason);
  if (step < 0) throw_error<InvalidArgumentError>(fn, "step must be >= 0, got {}", step);
  const std::string path = join_path(directory_, kPrefix + std::to_string(step));
  checkpoint_.save(path);

  // Only process 0 deletes. The others may already be on their way to the next save, but its
  // staging directory cannot exist before process 0 takes part in it (make_save_id).
  const std::optional<Mesh> mesh = checkpoint_.process_mesh(fn);
  if (mesh && mesh->process_index() != 0) return path;
  std::random_device random;
  for (const std::string& name : list_directory(directory_, fn)) {
    if (is_leftover(name)) remove_all(join_path(directory_, name), fn);
  }
  std::vector<std::pair<int64_t, std::string>> kept = complete();
  kept.erase(std::remove_if(kept.begin(), kept.end(),
                            [&](const auto& entry) { return entry.second == path; }),
             kept.end());
  const int64_t excess = static_cast<int64_t>(kept.size()) + 1 - max_to_keep_;
  for (int64_t i = 0; i < excess; ++i) {
    // Renamed first, so that a crash mid-way never leaves a half-deleted ckpt-<step>.
    const std::string doomed = fmt::format("{}.tmp-deleted-{:08x}", kept[i].second, random());
    rename_path(kept[i].second, doomed, fn);
    remove_all(doomed, fn);
  }
  return path;
}

std::optional<std::string> CheckpointManager::latest() const {
  std::vector<std::pair<int64_t, std::string>> all = complete();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::optional<int64_t> CheckpointManager::restore_latest() {
  std::optional<std::string> path = latest();
  if (!path) return std::nullopt;
  checkpoint_.restore(*path);
  return checkpoint_step(*path);
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> out;
  for (auto& [step, path] : complete()) out.push_back(std::move(path));
  return out;
}

}  // namespace dtensor
