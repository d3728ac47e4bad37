#include "runtime/mpi/comm_thread.h"

#include <utility>

namespace dtensor {

CommThread::~CommThread() { stop(); }

uint64_t CommThread::submit(std::function<void()> work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) {
    stopping_ = false;
    thread_ = std::thread([this] { loop(); });
  }
  queue_.push_back(std::move(work));
  const uint64_t ticket = ++submitted_;
  work_ready_.notify_one();
  return ticket;
}

void CommThread::wait(uint64_t ticket) {
  if (done(ticket)) return;
  std::unique_lock<std::mutex> lock(mu_);
  work_done_.wait(lock, [&] { return done(ticket); });
}

void CommThread::drain() {
  uint64_t last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = submitted_;
  }
  wait(last);
}

void CommThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
    work_ready_.notify_one();
  }
  thread_.join();
  thread_ = std::thread();
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // what the work held goes before its ticket is marked done
    lock.lock();
    completed_.fetch_add(1, std::memory_order_release);
    work_done_.notify_all();
  }
}

}  // namespace dtensor
