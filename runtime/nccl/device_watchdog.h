// Watches device collectives after they are enqueued. A collective on a CUDA stream
// returns at once, and a rank whose peer is stopped, stuck or gone then waits inside the
// GPU for ever: nothing in its own thread can notice. The watchdog keeps a marker per
// enqueued operation (a CUDA event recorded after it, in NcclComm) and, from a thread of
// its own, checks that the oldest unfinished one completes within the operation timeout
// and that the communicator reports no asynchronous error. When either fails it calls
// `on_failure` with a message naming the operation; the default ends the process, since
// the blocked caller cannot be unblocked safely and results it would get are garbage.
// Independent of CUDA, so its logic is tested without a GPU.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace hvdrun::runtime {

class DeviceWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  /// An opaque handle for one enqueued operation (a CUDA event).
  using Marker = void*;

  struct Hooks {
    /// True once the operation behind `m` has completed.
    std::function<bool(Marker m)> done;
    /// Gives `m` back once it is no longer watched (completed, or at shutdown).
    std::function<void(Marker m)> release;
    /// "" while the communicator is healthy, else what went wrong.
    std::function<std::string()> async_error;
    /// Called once, from the watchdog's thread, with the reason.
    std::function<void(const std::string& why)> on_failure;
  };

  /// Starts the watchdog thread. `who` names this rank in messages ("rank 1 of 4").
  DeviceWatchdog(Hooks hooks, std::chrono::milliseconds op_timeout, std::string who,
                 std::chrono::milliseconds poll = std::chrono::milliseconds(100));
  /// Stops the thread and releases the markers still held.
  ~DeviceWatchdog();
  DeviceWatchdog(const DeviceWatchdog&) = delete;
  DeviceWatchdog& operator=(const DeviceWatchdog&) = delete;

  /// Watches operation `m`, enqueued now: a `kind` ("allreduce", a string literal) of
  /// `count` elements, from rank `root` when it has one. Cheap: the description is only
  /// formatted if the operation fails.
  void track(Marker m, const char* kind, std::size_t count, int root = -1);
  /// Operations enqueued and not yet seen complete.
  std::size_t pending() const;
  /// True once on_failure has been called.
  bool failed() const;

  /// on_failure's default: writes `why` to stderr and ends the process with kExitCode.
  [[noreturn]] static void exit_process(const std::string& why);
  static constexpr int kExitCode = 70;

 private:
  struct Op {
    Marker marker;
    Clock::time_point deadline;
    std::uint64_t seq;
    const char* kind;
    std::size_t count;
    int root;
  };

  void run();
  // One round: drops completed operations from the front, then checks the oldest one
  // and the communicator. Returns the failure, or "".
  std::string check_locked(Clock::time_point now);

  Hooks hooks_;
  const std::chrono::milliseconds op_timeout_;
  const std::chrono::milliseconds poll_;
  const std::string who_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  std::uint64_t next_seq_ = 1;
  bool stop_ = false;
  bool failed_ = false;
  std::thread thread_;
};

}  // namespace hvdrun::runtime
