#include "train/ps/cluster_spec.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/error.h"

namespace dtensor::ps {
namespace {

constexpr const char* kFn = "ClusterSpec";

std::vector<std::string> addresses(const nlohmann::json& cluster, const std::string& key) {
  std::vector<std::string> out;
  if (!cluster.contains(key)) return out;
  const nlohmann::json& list = cluster.at(key);
  if (!list.is_array()) {
    throw_error<InvalidArgumentError>(kFn, "cluster.{} must be a list of \"host:port\" strings",
                                      key);
  }
  for (const nlohmann::json& a : list) {
    if (!a.is_string()) {
      throw_error<InvalidArgumentError>(kFn, "cluster.{} must be a list of \"host:port\" strings",
                                        key);
    }
    out.push_back(a.get<std::string>());
  }
  return out;
}

bool valid_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return false;
  const long value = std::strtol(port.c_str(), nullptr, 10);
  return value >= 1 && value <= 65535;
}

TaskType parse_type(const std::string& type) {
  if (type == "chief" || type == "coordinator") return TaskType::kChief;
  if (type == "worker") return TaskType::kWorker;
  if (type == "ps") return TaskType::kPs;
  throw_error<InvalidArgumentError>(kFn, "task type '{}' is not one of chief, worker, ps", type);
}

}  // namespace

const char* task_type_name(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
  }
  return "?";
}

std::string TaskId::str() const {
  return std::string(task_type_name(type)) + ":" + std::to_string(index);
}

ClusterSpec ClusterSpec::parse(const std::string& json) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw_error<InvalidArgumentError>(kFn, "not valid JSON: {}", e.what());
  }
  if (!doc.is_object() || !doc.contains("cluster") || !doc.at("cluster").is_object()) {
    throw_error<InvalidArgumentError>(kFn, "no \"cluster\" object in {}", json);
  }
  if (!doc.contains("task") || !doc.at("task").is_object() || !doc.at("task").contains("type") ||
      !doc.at("task").at("type").is_string() || !doc.at("task").contains("index") ||
      !doc.at("task").at("index").is_number_integer()) {
    throw_error<InvalidArgumentError>(
        kFn, "no \"task\" object with a string \"type\" and an integer \"index\" in {}", json);
  }
  const nlohmann::json& cluster = doc.at("cluster");
  for (const auto& [key, value] : cluster.items()) {
    if (key != "chief" && key != "coordinator" && key != "worker" && key != "ps") {
      throw_error<InvalidArgumentError>(kFn, "task type '{}' is not one of chief, worker, ps", key);
    }
  }
  ClusterSpec spec;
  std::vector<std::string> chiefs = addresses(cluster, "chief");
  for (std::string& a : addresses(cluster, "coordinator")) chiefs.push_back(std::move(a));
  if (chiefs.size() != 1) {
    throw_error<InvalidArgumentError>(kFn, "the cluster needs exactly 1 chief, has {}",
                                      chiefs.size());
  }
  spec.chief_ = chiefs[0];
  spec.workers_ = addresses(cluster, "worker");
  spec.ps_ = addresses(cluster, "ps");
  spec.task_ = {parse_type(doc.at("task").at("type").get<std::string>()),
                doc.at("task").at("index").get<int64_t>()};
  spec.validate();
  return spec;
}

ClusterSpec ClusterSpec::from_environment() {
  const char* config = std::getenv("TF_CONFIG");
  if (config == nullptr) throw_error<InvalidArgumentError>(kFn, "TF_CONFIG is not set");
  return parse(config);
}

void ClusterSpec::validate() const {
  if (workers_.empty()) throw_error<InvalidArgumentError>(kFn, "the cluster has no worker task");
  if (ps_.empty()) throw_error<InvalidArgumentError>(kFn, "the cluster has no ps task");
  std::set<std::string> seen;
  auto check = [&](const TaskId& id, const std::string& a) {
    if (!valid_address(a)) {
      throw_error<InvalidArgumentError>(kFn, "address '{}' of {} is not host:port", a, id.str());
    }
    if (!seen.insert(a).second) {
      throw_error<InvalidArgumentError>(kFn, "address '{}' of {} is used by another task", a,
                                        id.str());
    }
  };
  check({TaskType::kChief, 0}, chief_);
  for (size_t i = 0; i < workers_.size(); ++i) {
    check({TaskType::kWorker, static_cast<int64_t>(i)}, workers_[i]);
  }
  for (size_t i = 0; i < ps_.size(); ++i) check({TaskType::kPs, static_cast<int64_t>(i)}, ps_[i]);
  address(task_);
}

const std::string& ClusterSpec::address(const TaskId& task) const {
  const int64_t n = task.type == TaskType::kChief    ? 1
                    : task.type == TaskType::kWorker ? num_workers()
                                                     : num_ps();
  if (task.index < 0 || task.index >= n) {
    throw_error<InvalidArgumentError>(kFn, "task {} out of range: the cluster has {} {} task{}",
                                      task.str(), n, task_type_name(task.type), n == 1 ? "" : "s");
  }
  if (task.type == TaskType::kChief) return chief_;
  return task.type == TaskType::kWorker ? workers_[task.index] : ps_[task.index];
}

ClusterSpec ClusterSpec::as_task(TaskId task) const {
  ClusterSpec out = *this;
  out.task_ = task;
  out.validate();
  return out;
}

std::string ClusterSpec::to_json() const {
  nlohmann::json doc;
  doc["cluster"]["chief"] = {chief_};
  doc["cluster"]["worker"] = workers_;
  doc["cluster"]["ps"] = ps_;
  doc["task"]["type"] = task_type_name(task_.type);
  doc["task"]["index"] = task_.index;
  return doc.dump();
}

}  // namespace dtensor::ps
