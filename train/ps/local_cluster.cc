#include "train/ps/local_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/error.h"

namespace dtensor::ps::testing {

ReservedPort::ReservedPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd_ < 0 || ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd_ >= 0) ::close(fd_);
    throw_error<IoError>("ReservedPort", "cannot bind a socket on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
}

ReservedPort::~ReservedPort() { ::close(fd_); }

LocalCluster::LocalCluster(int64_t num_workers, int64_t num_ps, const FunctionRegistry& registry)
    : registry_(registry) {
  // A reserved port's address.
  auto reserve = [&] {
    ports_.push_back(std::make_unique<ReservedPort>());
    return ports_.back()->address();
  };
  nlohmann::json doc;
  doc["cluster"]["chief"] = {reserve()};
  for (int64_t p = 0; p < num_ps; ++p) {
    ps_.push_back(std::make_unique<ParameterServerService>());
    const std::string address = reserve();
    ps_servers_.push_back(std::make_unique<TaskServer>(
        "ps:" + std::to_string(p), address, std::vector<grpc::Service*>{ps_.back().get()}));
    doc["cluster"]["ps"].push_back(address);
  }
  for (int64_t w = 0; w < num_workers; ++w) {
    workers_.push_back(std::make_unique<WorkerService>(registry_, /*rpc_timeout_s=*/5));
    const std::string address = reserve();
    worker_servers_.push_back(
        std::make_unique<TaskServer>("worker:" + std::to_string(w), address,
                                     std::vector<grpc::Service*>{workers_.back().get()}));
    doc["cluster"]["worker"].push_back(address);
  }
  doc["task"] = {{"type", "chief"}, {"index", 0}};
  spec_ = ClusterSpec::parse(doc.dump());
}

void LocalCluster::stop_worker(int64_t w) { worker_servers_.at(static_cast<size_t>(w)).reset(); }

void LocalCluster::start_worker(int64_t w) {
  const size_t i = static_cast<size_t>(w);
  worker_servers_.at(i).reset();
  workers_.at(i) = std::make_unique<WorkerService>(registry_, /*rpc_timeout_s=*/5);
  worker_servers_[i] = std::make_unique<TaskServer>("worker:" + std::to_string(w),
                                                    spec_.address({TaskType::kWorker, w}),
                                                    std::vector<grpc::Service*>{workers_[i].get()});
}

void LocalCluster::stop_ps(int64_t p) { ps_servers_.at(static_cast<size_t>(p)).reset(); }

}  // namespace dtensor::ps::testing
