// Elastic mode's host discovery: the user's --host-discovery-script, run as a child with a
// deadline, and its output (`host` or `host:slots` lines) parsed into hosts. The job loop
// polls a run without blocking (start(), then poll() each turn); the elastic loop waits
// for one (run()).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "hostfile/hosts.h"

namespace hvdrun::launcher {

/// What one run of the script found: the hosts, or why there are none.
struct DiscoveryResult {
  /// The hosts in the order printed (empty when `error` is set, or when none was).
  std::vector<hostfile::HostSlots> hosts;
  /// Set when the run failed: it exited non-zero, was killed, did not finish in time, or
  /// printed something that is not a host line. Names the script and quotes its stderr.
  std::optional<std::string> error;
};

/// Parses a discovery script's output: one host per line as `host`, `host:slots`,
/// `[ipv6]` or `[ipv6]:slots`; blank lines and `#` comments are skipped; a bare host gets
/// `slots_per_host` slots. Throws UsageError naming `script` and the offending line.
std::vector<hostfile::HostSlots> parse_discovery_output(std::string_view text, int slots_per_host,
                                                        std::string_view script);

/// One run of the discovery script at a time.
class Discovery {
 public:
  using Clock = std::chrono::steady_clock;
  /// `script` is executed directly (it needs a #! line and the execute bit), with the
  /// launcher's environment; a run longer than `timeout` is killed and is an error.
  Discovery(std::string script, int slots_per_host, std::chrono::milliseconds timeout);
  ~Discovery();
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  /// Starts a run unless one is in progress.
  void start();
  /// Whether a run is in progress.
  bool running() const { return pid_ > 0; }
  /// The running script's process id, or -1.
  pid_t pid() const { return pid_; }
  /// Reads what the running script has written so far, without blocking; returns the
  /// result once it has ended (or passed its deadline), nullopt while it runs or when no
  /// run was started.
  std::optional<DiscoveryResult> poll();
  /// Starts a run and waits for its result.
  DiscoveryResult run();

 private:
  DiscoveryResult finish(int wait_status);
  void stop();

  std::string script_;
  int slots_per_host_;
  std::chrono::milliseconds timeout_;
  pid_t pid_ = -1;
  Clock::time_point deadline_{};
  UniqueFd out_;
  UniqueFd err_;
  std::string out_text_;
  std::string err_text_;
};

}  // namespace hvdrun::launcher
