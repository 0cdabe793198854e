// Aborts a communicator when its generation ends (runtime/core/generation_end.h): a device
// collective waits inside the GPU, where no check of the end mark can reach it, so the
// NCCL communicator is aborted instead (ncclCommAbort), which makes the operations in
// flight fail at once. The abort runs on a thread of its own, since the mark's wakers must
// not block and an abort may take a while. Independent of NCCL: the abort is a function,
// so the watching is tested without a GPU (tests/runtime/nccl/nccl_abort_test.cc).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/core/generation_end.h"

namespace hvdrun::runtime {

class AbortOnEnd {
 public:
  /// Watches the process's end mark; when the generation ends (or has already ended),
  /// calls `abort` once with the mark's reason, from the watcher's thread.
  explicit AbortOnEnd(std::function<void(const std::string& why)> abort);
  /// Stops watching; returns once `abort` is not running (it is not called afterwards).
  ~AbortOnEnd();
  AbortOnEnd(const AbortOnEnd&) = delete;
  AbortOnEnd& operator=(const AbortOnEnd&) = delete;

  /// True once `abort` has returned.
  bool aborted() const;

 private:
  void run();

  std::function<void(const std::string&)> abort_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool ended_ = false;    // the mark was set: abort
  bool stop_ = false;     // the destructor runs: leave
  bool aborted_ = false;  // abort_ returned
  std::string why_;
  std::thread thread_;
  std::unique_ptr<EndWaker> waker_;  // last: registered once the thread waits
};

}  // namespace hvdrun::runtime
