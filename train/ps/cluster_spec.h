// ClusterSpec: the tasks of a parameter-server job and which of them this process is, read from
// a TF_CONFIG-style JSON document:
//
//   {"cluster": {"chief": ["127.0.0.1:7000"],
//                "worker": ["127.0.0.1:7001", "127.0.0.1:7002"],
//                "ps": ["127.0.0.1:7003"]},
//    "task": {"type": "worker", "index": 1}}
//
// "chief" is the coordinator (tf's ParameterServerStrategy calls it that too); "coordinator" is
// accepted as a synonym. A valid spec has exactly one chief, at least one worker and one ps, and
// addresses of the form host:port (port 1..65535) that no two tasks share. Errors are
// InvalidArgumentError "[ClusterSpec] ..." naming the task or field at fault.
//
// A plain value; thread-safe for const use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtensor::ps {

enum class TaskType { kChief, kWorker, kPs };

// "chief", "worker", "ps".
const char* task_type_name(TaskType type);

struct TaskId {
  TaskType type = TaskType::kChief;
  int64_t index = 0;
  // "worker:1"
  std::string str() const;
  bool operator==(const TaskId& o) const { return type == o.type && index == o.index; }
};

class ClusterSpec {
 public:
  // Parses and validates `json` (see the header comment).
  static ClusterSpec parse(const std::string& json);
  // parse() of the TF_CONFIG environment variable; InvalidArgumentError when it is unset.
  static ClusterSpec from_environment();

  const std::string& chief() const { return chief_; }
  const std::vector<std::string>& workers() const { return workers_; }
  const std::vector<std::string>& parameter_servers() const { return ps_; }
  int64_t num_workers() const { return static_cast<int64_t>(workers_.size()); }
  int64_t num_ps() const { return static_cast<int64_t>(ps_.size()); }
  // The address of `task`; InvalidArgumentError when the cluster has no such task.
  const std::string& address(const TaskId& task) const;
  // This process's task.
  const TaskId& task() const { return task_; }
  // The same cluster seen from another task (checked like parse()).
  ClusterSpec as_task(TaskId task) const;
  // The JSON form (parse(to_json()) gives this spec back).
  std::string to_json() const;

 private:
  void validate() const;
  std::string chief_;
  std::vector<std::string> workers_, ps_;
  TaskId task_;
};

}  // namespace dtensor::ps
