// ThreadPool: a fixed set of worker threads that run the indices of a parallel loop.
//
// `parallel_for(n, fn)` runs fn(0) .. fn(n-1) and returns when all of them are done; the calling
// thread works on the loop too, so a pool of N threads owns N-1 workers. Indices are handed out one
// at a time from an atomic counter, so uneven tasks balance across threads.
//
// Ownership: the pool owns its workers and joins them in its destructor; `fn` is borrowed for the
// duration of the call. `global()` is created on first use and never destroyed, so it may be used
// from static destructors.
//
// Thread-safety: parallel_for may be called concurrently from any number of unrelated threads;
// the calls do not serialise: each one runs on its caller plus whichever workers are idle, and
// a caller can always finish its own loop alone, so no call waits on another. A parallel_for made
// from inside a task of the same pool runs inline on that thread. Destroying a pool while a call
// on it is in progress is undefined.
//
// Waiting: a worker that runs out of jobs spins for a bounded window (`idle_spin`, a few hundred
// microseconds by default) before it sleeps on a condition variable, so the loops of a training
// step, posted tens of microseconds apart, start without a kernel wake-up, while an idle pool
// costs no CPU. A caller waiting for helpers to finish spins for the same window before sleeping.
// A job wakes sleeping workers only when there are some.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtensor {

class ThreadPool {
 public:
  // How long an idle worker, or a caller waiting for helpers, spins before sleeping: by default,
  // and in the global pool of a process that shares the cores with other ranks of an MPI launch
  // (pool threads x local ranks > cores).
  static constexpr std::chrono::microseconds kDefaultIdleSpin{300};
  static constexpr std::chrono::microseconds kSharedCoresIdleSpin{30};

  // `num_threads` is the total parallelism, the calling thread included; must be >= 1, and
  // `idle_spin` >= 0 (throws InvalidArgumentError otherwise).
  explicit ThreadPool(int num_threads, std::chrono::microseconds idle_spin = kDefaultIdleSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process-wide pool, sized to std::thread::hardware_concurrency() (at least 1). The
  // environment variable DTENSOR_NUM_THREADS, when set, overrides the size, and
  // DTENSOR_POOL_SPIN_US the idle spin window in microseconds (0: sleep at once; default
  // kDefaultIdleSpin, or kSharedCoresIdleSpin when the launcher's OMPI_COMM_WORLD_LOCAL_SIZE or
  // MPI_LOCALNRANKS ranks need more threads than there are cores); a value that is not an integer
  // in range throws InvalidArgumentError.
  static ThreadPool& global();

  int num_threads() const { return num_threads_; }
  std::chrono::microseconds idle_spin() const { return idle_spin_; }

  // Runs fn(i) for every i in [0, n) and returns when all are done; the calling thread takes part.
  // If a task throws, indices that have not started yet are skipped, and the first exception is
  // rethrown here once every started task has finished. n <= 1, a 1-thread pool, or a call from
  // inside a task of this pool runs the loop inline on the calling thread.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // True while the current thread runs a task of some ThreadPool (as a worker, or as a caller
  // inside parallel_for).
  static bool in_worker();

 private:
  struct Job;

  void worker_loop();
  // Sets stop_, wakes every worker and joins them.
  void stop_workers();
  // The first job with unclaimed indices, or nullptr. Requires mu_.
  Job* find_job_locked() const;
  // Claims and runs indices of `job` until none are left or a task has failed.
  void run_indices(Job& job);
  bool on_task_stack() const;

  const int num_threads_;
  const std::chrono::microseconds idle_spin_;
  std::vector<std::thread> workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // a job was posted, or the pool is stopping
  std::vector<Job*> jobs_;           // loops in progress, oldest first; guarded by mu_
  bool stop_ = false;                // guarded by mu_
  int sleeping_ = 0;                 // workers waiting on work_cv_; guarded by mu_
  // Bumped on every posted job (and on stop) so that idle workers can spin on it before sleeping.
  std::atomic<uint64_t> post_epoch_{0};
};

}  // namespace dtensor
