// See device_watchdog.h.
#include "runtime/nccl/device_watchdog.h"

#include "common/log.h"
#include "common/seconds_text.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace hvdrun::runtime {

DeviceWatchdog::DeviceWatchdog(Hooks hooks, std::chrono::milliseconds op_timeout, std::string who,
                               std::chrono::milliseconds poll)
    : hooks_(std::move(hooks)), op_timeout_(op_timeout), poll_(poll), who_(std::move(who)) {
  if (!hooks_.on_failure) hooks_.on_failure = &DeviceWatchdog::exit_process;
  thread_ = std::thread([this] { run(); });
}

DeviceWatchdog::~DeviceWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (const auto& op : ops_) hooks_.release(op.marker);
}

void DeviceWatchdog::track(Marker m, const char* kind, std::size_t count, int root) {
  const auto deadline = Clock::now() + op_timeout_;
  std::lock_guard lock(mu_);
  ops_.push_back({m, deadline, next_seq_++, kind, count, root});
}

std::size_t DeviceWatchdog::pending() const {
  std::lock_guard lock(mu_);
  return ops_.size();
}

bool DeviceWatchdog::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

void DeviceWatchdog::exit_process(const std::string& why) {
  // On stderr, where the launcher quotes a failed rank's last lines from.
  hvdrun::log().flush();
  std::fflush(nullptr);
  std::fprintf(stderr, "%s\n", why.c_str());
  std::fflush(stderr);
  // The caller's thread may be blocked on the GPU with no way back: leave at once, and
  // let the launcher stop the rest of the job.
  std::_Exit(kExitCode);
}

std::string DeviceWatchdog::check_locked(Clock::time_point now) {
  while (!ops_.empty() && hooks_.done(ops_.front().marker)) {
    hooks_.release(ops_.front().marker);
    ops_.pop_front();
  }
  if (auto err = hooks_.async_error(); !err.empty())
    return "hvdrun: " + who_ + ": NCCL failed: " + err +
           " (a peer may be gone or the network between GPUs broken); ending this rank";
  if (!ops_.empty() && now >= ops_.front().deadline) {
    const auto& op = ops_.front();
    std::string what = std::string(op.kind) + " of " + std::to_string(op.count) + " elements";
    if (op.root >= 0) what += " from rank " + std::to_string(op.root);
    return "hvdrun: " + who_ + ": device " + what + " (operation " + std::to_string(op.seq) +
           ") did not complete within " + seconds_text(op_timeout_) +
           " s (HVDRUN_OP_TIMEOUT): a rank is stopped, stuck in its own code or gone; ending "
           "this rank (exit " +
           std::to_string(kExitCode) + ")";
  }
  return {};
}

void DeviceWatchdog::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_ || failed_) continue;
    std::string why = check_locked(Clock::now());
    if (why.empty()) continue;
    failed_ = true;
    lock.unlock();
    hooks_.on_failure(why);
    lock.lock();
  }
}

}  // namespace hvdrun::runtime
