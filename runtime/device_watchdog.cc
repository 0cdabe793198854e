// See device_watchdog.h.
#include "runtime/device_watchdog.h"

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

void DeviceWatchdog::track(Marker m, std::string what) {
  std::lock_guard lock(mu_);
  ops_.push_back({m, Clock::now() + op_timeout_, next_seq_++, std::move(what)});
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
  spdlog::default_logger()->flush();
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
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", static_cast<double>(op_timeout_.count()) / 1000.0);
    return "hvdrun: " + who_ + ": device " + op.what + " (operation " + std::to_string(op.seq) +
           ") did not complete within " + secs +
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
