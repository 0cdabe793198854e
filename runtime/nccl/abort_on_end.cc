// The end mark's watcher that aborts a communicator (see abort_on_end.h).
#include "runtime/nccl/abort_on_end.h"

#include <utility>

namespace hvdrun::runtime {

AbortOnEnd::AbortOnEnd(std::function<void(const std::string& why)> abort)
    : abort_(std::move(abort)), thread_([this] { run(); }) {
  // The waker only records the reason and wakes the thread: it runs under the mark's lock.
  waker_ = std::make_unique<EndWaker>([this](const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (ended_) return;
      ended_ = true;
      why_ = why;
    }
    cv_.notify_all();
  });
}

AbortOnEnd::~AbortOnEnd() {
  waker_.reset();  // no waker runs from here on
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool AbortOnEnd::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

void AbortOnEnd::run() {
  std::string why;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return ended_ || stop_; });
    if (!ended_) return;
    why = why_;
  }
  abort_(why);
  std::lock_guard lock(mu_);
  aborted_ = true;
}

}  // namespace hvdrun::runtime
