// The collective engine: one background thread runs every collective of this process, in
// the order submitted, one at a time. Submission order is the contract that keeps ranks
// from deadlocking: ranks that submit the same collectives in the same order meet in
// every one of them, whichever threads submit and whenever they wait. Blocking calls go
// through the same order (run inline when nothing is pending, so they cost no thread hop).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace hvdrun::runtime {

/// Runs tasks in submission order on one worker thread; hands out handles to wait on.
class Engine {
 public:
  using Task = std::function<void()>;
  using Handle = std::int64_t;

  Engine();
  /// Runs what is queued, then joins the worker (see drain()).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues `task`; `what` names it in errors ("allreduce of 10 float32"). Returns a
  /// handle (> 0) to poll or wait for. After a task has failed, later tasks are not run:
  /// they fail with the first failure's message.
  Handle submit(std::string what, Task task);
  /// Runs `fn` after everything submitted before it, on the caller's thread when nothing
  /// is queued or running (then without allocating: a blocking collective costs two
  /// lock round trips here); rethrows its exception. `what` names it in errors.
  template <typename Fn>
  void run(const char* what, Fn&& fn) {
    std::exception_ptr error;
    if (!begin_inline(what, &error)) return run_queued(what, Task(std::forward<Fn>(fn)));
    if (!error) {
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
        record_failure(error);
      }
    }
    end_inline();
    if (error) std::rethrow_exception(error);
  }
  /// True once the task behind `h` has finished. Throws Error for an unknown handle.
  bool poll(Handle h);
  /// Waits for the task behind `h`, forgets the handle and rethrows the task's exception.
  /// Throws Error for an unknown handle.
  void wait(Handle h);
  /// Number of handles not yet waited for.
  std::int64_t pending();
  /// Waits until every submitted task has finished (handles stay valid).
  void drain();
  /// The first failure's message, "" while every task has succeeded.
  std::string failure();

 private:
  struct Slot {
    std::string what;
    Task task;
    bool done = false;
    std::exception_ptr error;
  };

  void worker();
  // Runs one slot's task (or fails it after an earlier failure); called without mu_.
  void execute(Slot& slot);
  // The inline path of run(): true when the caller may run now (nothing queued or
  // running), with *earlier set when an earlier task failed; end_inline() after it.
  bool begin_inline(const char* what, std::exception_ptr* earlier);
  void end_inline();
  void run_queued(const char* what, Task task);
  // Keeps the first failure's message for the tasks after it.
  void record_failure(const std::exception_ptr& error);
  // The error of a task not run because of an earlier failure (mu_ held).
  std::exception_ptr not_run(const std::string& what) const;
  std::shared_ptr<Slot> find(Handle h, const char* fn);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Slot>> queue_;
  std::unordered_map<Handle, std::shared_ptr<Slot>> slots_;
  Handle next_ = 1;
  bool busy_ = false;      // a task is running (on the worker or inline)
  bool stopping_ = false;  // the destructor asked the worker to end
  int draining_ = 0;       // threads inside drain()
  std::string failure_;    // the first failure's message, "" while none
  std::thread thread_;
};

}  // namespace hvdrun::runtime
