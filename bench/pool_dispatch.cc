// What one ThreadPool::parallel_for(2, ...) costs beyond its tasks, on a 2-thread pool (the caller
// plus one worker), in the situations a captured training step puts it in: calls back to back
// (the worker is still spinning), calls separated by serial work on the caller (the worker may
// have gone to sleep), and calls after a long idle pause (it has). Each task busy-waits `work_us`,
// so a worker that arrives late shows up as extra time: the caller then runs both tasks itself
// (worker_ran_pct: the share of calls in which the worker ran a task).
// Also prints the process CPU time burnt while the pool sits idle after a call.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "cli/flags.h"
#include "runtime/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

void busy_wait_us(double us) {
  const auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  dtensor::cli::Flags flags("pool_dispatch",
                            "Overhead of one parallel_for(2) on a 2-thread pool, in microseconds "
                            "(median), with the worker hot, after serial gaps, and asleep.");
  int64_t calls = 400;
  flags.add_int("--calls", &calls, "timed calls per measurement (default 400)", 1, 1000000);
  int64_t idle_spin_us = dtensor::ThreadPool::kDefaultIdleSpin.count();
  flags.add_int("--idle_spin_us", &idle_spin_us,
                "how long an idle worker spins before sleeping (default: the pool's)", 0, 1000000);
  if (std::optional<int> code = flags.parse(argc, argv)) return *code;
  using namespace dtensor;
  ThreadPool pool(2, std::chrono::microseconds(idle_spin_us));

  struct Case {
    const char* name;
    double gap_us;   // serial busy work on the caller between two calls
    bool sleep_gap;  // the gap is a sleep of 5 ms instead
  };
  const Case cases[] = {{"back_to_back", 0, false}, {"gap", 20, false},   {"gap", 100, false},
                        {"gap", 300, false},        {"gap", 1000, false}, {"asleep", 5000, true}};
  for (double work_us : {0.0, 20.0, 100.0}) {
    for (const Case& c : cases) {
      const int64_t n_calls = c.sleep_gap ? std::min<int64_t>(calls, 100) : calls;
      std::vector<double> overhead;
      overhead.reserve(static_cast<size_t>(n_calls));
      int64_t worker_ran = 0;  // timed calls in which the worker ran a task
      const std::thread::id caller = std::this_thread::get_id();
      for (int64_t k = 0; k < n_calls + 5; ++k) {
        if (c.sleep_gap) {
          std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(c.gap_us)));
        } else {
          busy_wait_us(c.gap_us);
        }
        const auto start = Clock::now();
        std::atomic<bool> on_worker{false};
        pool.parallel_for(2, [&](int64_t) {
          if (std::this_thread::get_id() != caller) on_worker = true;
          busy_wait_us(work_us);
        });
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
        if (k >= 5) {
          overhead.push_back(us - work_us);
          worker_ran += on_worker.load() ? 1 : 0;
        }
      }
      bench::report("pool_dispatch",
                    {{"case", std::string(c.name)},
                     {"idle_spin_us", idle_spin_us},
                     {"gap_us", c.gap_us},
                     {"work_us", work_us},
                     {"calls", n_calls},
                     {"worker_ran_pct",
                      100.0 * static_cast<double>(worker_ran) / static_cast<double>(n_calls)}},
                    median(overhead), "us");
    }
  }

  // CPU time of the whole process over an idle second that follows a burst of calls: the workers'
  // spinning after their last job, bounded, then sleep.
  for (int i = 0; i < 100; ++i) pool.parallel_for(2, [](int64_t) {});
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  bench::report("pool_dispatch",
                {{"case", std::string("idle_cpu_after_burst")}, {"idle_spin_us", idle_spin_us}},
                (process_cpu_seconds() - cpu0) * 1e3, "ms CPU per idle second");
}
