// The port that agents started by srun connect back to (`--launcher slurm`), on the
// launcher's side. Handshakes run side by side without blocking, under the
// pre-authentication gate every listening port of hvdrun shares (common/preauth_gate.h): a
// silent or slow connection holds a place in the cap for a few seconds at most and never
// delays an agent; a flood closes its own oldest connections, not the agents'.
//
// Handshake (docs/agent-protocol.md): the launcher sends a 32-byte nonce; the agent answers
// u32 length | "NODE\nJOB.STEP" | HMAC-SHA256(secret, "hvdrun-slurm-agent" | nonce | text);
// the launcher checks the tag, then the socket carries the agent protocol.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/preauth_gate.h"

namespace hvdrun::launcher {

/// An agent that proved it holds the step's secret.
struct ConnectedAgent {
  std::string node;  ///< SLURMD_NODENAME (or the host name) the agent reported
  std::string step;  ///< JOB.STEP, for scancel; may be empty
  UniqueFd sock;     ///< blocking; carries the agent protocol from here on
};

/// The listening port and its handshakes in progress. Single-threaded.
class ConnectBackPort {
 public:
  using Clock = std::chrono::steady_clock;

  /// Listens on `bind_address` (an IPv4 literal; "0.0.0.0" for every interface), port
  /// chosen by the kernel. Throws SystemError or LaunchError.
  ConnectBackPort(const std::string& bind_address, const std::string& secret,
                  PreauthPolicy policy = {});
  ~ConnectBackPort();
  ConnectBackPort(const ConnectBackPort&) = delete;
  ConnectBackPort& operator=(const ConnectBackPort&) = delete;

  /// The port the kernel chose.
  std::uint16_t port() const { return port_; }

  /// Serves until `until`: accepts, advances every handshake as its bytes arrive and
  /// closes those past their deadline. Returns the agents that authenticated meanwhile
  /// (possibly none); returns early once at least one has.
  std::vector<ConnectedAgent> serve(Clock::time_point until);

  /// The gate's counters (pending, evicted, refused), for logs and tests.
  const PreauthGate& gate() const { return gate_; }

 private:
  struct Pending;
  void accept_all(Clock::time_point now);
  void advance(std::uint64_t key, std::vector<ConnectedAgent>& done);
  void drop(std::uint64_t key);

  UniqueFd listener_;
  std::uint16_t port_ = 0;
  std::string secret_;
  PreauthGate gate_;
  std::map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  std::uint64_t next_key_ = 1;
  Clock::time_point accept_paused_until_{};
  std::chrono::milliseconds accept_backoff_{0};
};

/// This machine's boot id (/proc/sys/kernel/random/boot_id), or empty.
std::string boot_id();

/// The agent's side: connects to the launcher at one of `targets` ("ADDR:PORT,..."), and
/// authenticates with `secret`; `launcher_boot` is the launcher's boot id. Returns the
/// socket, which carries the agent protocol from here on. Throws LaunchError.
UniqueFd connect_to_launcher(const std::string& targets, const std::string& secret,
                             const std::string& launcher_boot);

}  // namespace hvdrun::launcher
