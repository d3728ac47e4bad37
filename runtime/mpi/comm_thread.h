// CommThread: one worker thread that runs a process's queued communication in submission order,
// so that the blocking (tuned) MPI collectives of a gradient bucket run while the calling thread
// goes on computing. Open MPI progresses a nonblocking collective only inside MPI calls, and its
// nonblocking all-reduce (libnbc) is slower than the blocking one: a thread that makes the
// blocking call gets both the progress and the tuned algorithm.
//
// Work is numbered by submit() (tickets 1, 2, ...) and runs strictly in that order, one item at a
// time; done(t) and wait(t) tell when ticket t and everything before it has run. drain() waits for
// everything submitted so far: a caller that is about to make an MPI call of its own drains first,
// so that every process issues its MPI calls in program order.
//
// The thread starts on the first submit and is joined by the destructor after the queue runs dry.
// Work must not throw (catch and hand errors over through the caller's own state); an exception
// that escapes ends the process through std::terminate.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dtensor {

class CommThread {
 public:
  CommThread() = default;
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `work` and returns its ticket.
  uint64_t submit(std::function<void()> work);
  // Whether ticket `ticket` has run. Never blocks.
  bool done(uint64_t ticket) const { return completed_.load(std::memory_order_acquire) >= ticket; }
  // Blocks (sleeping, not spinning: the worker needs the core) until ticket `ticket` has run.
  void wait(uint64_t ticket);
  // Blocks until everything submitted so far has run.
  void drain();
  // Runs what is queued, then joins the thread; later submits start it again.
  void stop();

 private:
  void loop();

  mutable std::mutex mu_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> queue_;
  uint64_t submitted_ = 0;
  std::atomic<uint64_t> completed_{0};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dtensor
