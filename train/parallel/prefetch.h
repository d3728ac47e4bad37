// FSDP prefetch: the all-gathers of a layer's weights run on a gather thread of their own while the
// calling thread computes the previous layer, and a Timeline of when each gather and each layer's
// compute began and ended shows that they overlap.
//
//   GatherThread gathers(mesh);
//   GatherFlight next = start_gathers(gathers, {w1.value(), w2.value()}, {full1, full2},
//                                     "block1 gather", {&timeline});
//   ... compute block 0 ...
//   DTensor w1_full = next.take(0);   // blocks until the gathers are done (bounded)
//
// The gathers are plain relayouts (dtensor/relayout.h) to the compute layouts, so the values are
// bitwise those of a relayout on the calling thread. take() records on the calling thread's
// gradient tapes the relayout's VJP (the gradient relayouted back: the reduce-scatter), as a
// relayout there would. Inside a captured step (train/capture/function.h) the start and every
// take are recorded as calls of the program, sharing one flight, so a replay starts the gathers
// and waits for them at the same points.
//
// A mesh spanning processes gathers at start on the calling thread: collectives between processes
// must be issued in the same order on every process, which a second thread would not keep. The
// gathers are then early, not overlapped.
//
// Ownership: a GatherThread owns its thread and joins it on destruction (after the posted jobs);
// a flight owns the gathered values until they are taken. Thread-safety: GatherThread::post and
// Timeline are thread-safe; a GatherFlight is used by one thread (the one that computes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/dtensor.h"
#include "layout/layout.h"
#include "train/parallel/gather_meter.h"

namespace dtensor::parallel {

// When each named span (a gather, a layer's compute) began and ended, in microseconds since the
// timeline's origin, and on which lane ("gather" or "compute"). Off until enable().
class Timeline {
 public:
  struct Span {
    std::string name, lane;
    double begin_us = 0, end_us = 0;
  };
  void enable();
  void disable();
  bool enabled() const;
  // Opens a span (ignored while disabled); close() with the same name and lane ends the latest
  // open one.
  void open(const std::string& name, const std::string& lane);
  void close(const std::string& name, const std::string& lane);
  std::vector<Span> spans() const;
  void clear();
  // The spans as a chrome://tracing (Trace Event Format) JSON document, one thread per lane.
  std::string chrome_trace_json() const;

 private:
  double now_us() const;
  mutable std::mutex mu_;
  bool enabled_ = false;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<Span> spans_;
  std::vector<bool> open_;
};

// A thread that runs posted jobs in order (or runs them inline on the caller for a mesh spanning
// processes).
class GatherThread {
 public:
  explicit GatherThread(const Mesh& mesh);
  ~GatherThread();
  GatherThread(const GatherThread&) = delete;
  GatherThread& operator=(const GatherThread&) = delete;

  using Job = std::function<std::vector<DTensor>()>;
  // Queues `job` (or runs it now, inline); its result or exception comes through the future.
  std::shared_future<std::vector<DTensor>> post(Job job);
  bool runs_inline() const { return inline_; }

 private:
  void loop();
  const bool inline_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<std::vector<DTensor>()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

constexpr std::chrono::seconds kGatherTimeout{120};

// Who hears of a flight's gathers: the timeline (a span on its "gather" lane) and the meter (each
// gathered copy, as it is made; eager steps only, not replays of a captured one). Both borrowed;
// either may be null.
struct GatherWatch {
  Timeline* timeline = nullptr;
  GatherMeter* meter = nullptr;
};

// The gathers of one layer, started together; each value is taken once, in any order.
class GatherFlight {
 public:
  GatherFlight() = default;
  bool started() const { return state_ != nullptr; }
  // The gathered value `k` (in `compute`'s k-th layout); waits for the gathers, at most
  // kGatherTimeout (then CommunicationError "[GatherFlight::take] <name> did not finish ...").
  // Throws InvalidArgumentError naming the flight for a k out of range or taken before.
  DTensor take(size_t k);

  struct State;

 private:
  friend GatherFlight start_gathers(GatherThread&, const std::vector<DTensor>&,
                                    const std::vector<Layout>&, const std::string&, GatherWatch);
  std::shared_ptr<State> state_;
};

// Starts relayout(stored[k], compute[k]) for every k on `thread`, as one job named `name`.
// InvalidArgumentError naming the flight when the sizes differ.
GatherFlight start_gathers(GatherThread& thread, const std::vector<DTensor>& stored,
                           const std::vector<Layout>& compute, const std::string& name,
                           GatherWatch watch = {});

// A span of the calling thread's compute on `timeline` (its "compute" lane), opened or closed
// here, and at the same point of every replay of a captured step.
void mark_compute(Timeline& timeline, const std::string& name, bool open);

}  // namespace dtensor::parallel
