// Bounded concurrency for starting many hosts: at most `limit` host starts (logins) in
// flight, the next one begun as soon as one finishes, and none begun after a failure. A
// thousand logins at one moment would meet sshd's MaxStartups (10:30:100 by default drops
// connections beyond 10 unauthenticated ones), a container runtime's API rate limit or the
// launcher's own descriptor limit; pdsh's fanout (32) and the SSH preflight's thread pool
// (128) bound them the same way. Pure bookkeeping: the caller starts and watches the hosts.
#pragma once

#include <cstddef>
#include <optional>

namespace hvdrun::launcher {

/// The environment variable that sets the number of host starts in flight.
inline constexpr const char kLaunchConcurrencyVar[] = "HVDRUN_LAUNCH_CONCURRENCY";
/// The default number of host starts in flight (HVDRUN_LAUNCH_CONCURRENCY).
inline constexpr std::size_t kDefaultLaunchConcurrency = 128;

/// HVDRUN_LAUNCH_CONCURRENCY read from `value` (nullptr: unset): a whole number from 1 to
/// 65536, else kDefaultLaunchConcurrency when unset. Throws UsageError naming the variable.
std::size_t launch_concurrency(const char* value);

/// Hands out host indices 0 .. total-1 in order, never more than `limit` unfinished.
class StartWindow {
 public:
  /// `limit` 0 counts as 1.
  StartWindow(std::size_t total, std::size_t limit);

  /// The next host to start, when a slot is free, more hosts are left and no failure
  /// stopped the window; nullopt otherwise.
  std::optional<std::size_t> next();
  /// A host handed out by next() finished starting (well or not): its slot is free.
  void finished();
  /// A host failed: hand out no more (those in flight still finish).
  void stop() { stopped_ = true; }

  /// Hosts handed out and not yet finished.
  std::size_t in_flight() const { return in_flight_; }
  /// Hosts handed out so far.
  std::size_t started() const { return next_; }
  /// Hosts never handed out because of stop().
  std::size_t skipped() const { return stopped_ ? total_ - next_ : 0; }
  /// True when nothing is in flight and nothing more will be handed out.
  bool done() const { return in_flight_ == 0 && (stopped_ || next_ == total_); }

 private:
  std::size_t total_;
  std::size_t limit_;
  std::size_t next_ = 0;
  std::size_t in_flight_ = 0;
  bool stopped_ = false;
};

}  // namespace hvdrun::launcher
