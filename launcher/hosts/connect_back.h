// The port that agents started by srun connect back to (`--launcher slurm`), on the
// launcher's side. Handshakes run side by side without blocking, under the
// pre-authentication gate every listening port of hvdrun shares (common/preauth_gate.h): a
// silent or slow connection holds a place in the cap for a few seconds at most and never
// delays an agent; a flood closes its own oldest connections, not the agents'.
//
// Handshake (docs/agent-protocol.md), both ways before a frame is acted on:
//   launcher -> agent   nonce L (32 bytes)
//   agent -> launcher   u32 length | TEXT | nonce A (32) | HMAC(secret, "hvdrun-slurm-agent" |
//                       L | A | TEXT), TEXT = "NODE\nJOB.STEP\nIP:PORT" (the address the
//                       agent connected to)
//   launcher -> agent   HMAC(secret, "hvdrun-slurm-launcher" | A | L | TEXT)
// The launcher checks the agent's proof and that IP:PORT is where the connection arrived
// (a relay in between arrives from its own connection); the agent checks the launcher's
// proof before it reads a frame, and otherwise tries the launcher's next address. Only
// then does the socket carry the agent protocol. The agent connects only to addresses
// that can be the launcher's: on another machine (boot id) or network namespace, none
// that this node has itself (loopback, or an address such as docker0's present on both).
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
  std::string text;  ///< the whole TEXT of its hello (join mode reads more lines of it)
  std::string peer;  ///< the address it connected from, for messages
};

/// What a port is for. The Slurm agents' port (the defaults) binds a port the kernel
/// chooses and checks that each agent names the address its connection arrived at; join
/// mode's port (join_start.cc) binds the endpoint's port, and does not check the address:
/// a joining node may come through a Service's address translation.
struct ConnectBackSettings {
  /// The port in messages.
  std::string name = "Slurm agents' port";
  /// The port to bind; 0: the kernel chooses.
  std::uint16_t port = 0;
  /// Whether the address an agent names must be where its connection arrived.
  bool check_reached = true;
  /// The secret in messages.
  std::string secret_name = "the step's secret";
};

/// The listening port and its handshakes in progress. Single-threaded.
class ConnectBackPort {
 public:
  using Clock = std::chrono::steady_clock;

  /// Listens on `bind_address` (an IPv4 literal; "0.0.0.0" for every interface), port
  /// chosen by the kernel. Throws SystemError or LaunchError.
  ConnectBackPort(const std::string& bind_address, const std::string& secret,
                  PreauthPolicy policy = {}, ConnectBackSettings settings = {});
  ~ConnectBackPort();
  ConnectBackPort(const ConnectBackPort&) = delete;
  ConnectBackPort& operator=(const ConnectBackPort&) = delete;

  /// The port the kernel chose.
  std::uint16_t port() const { return port_; }

  /// Serves until `until`: accepts, advances every handshake as its bytes arrive and
  /// closes those past their deadline. Returns the agents that authenticated meanwhile
  /// (possibly none); returns early once at least one has. Looks once even when `until`
  /// has passed (without waiting), so that a caller's loop may poll the port.
  std::vector<ConnectedAgent> serve(Clock::time_point until);

  /// The gate's counters (pending, evicted, refused), for logs and tests.
  const PreauthGate& gate() const { return gate_; }

 private:
  struct Pending;
  void accept_all(Clock::time_point now);
  void advance(std::uint64_t key, std::vector<ConnectedAgent>& done);
  void drop(std::uint64_t key);

  ConnectBackSettings settings_;
  UniqueFd listener_;
  std::uint16_t port_ = 0;
  std::string secret_;
  PreauthGate gate_;
  std::map<std::uint64_t, std::unique_ptr<Pending>> pending_;
  std::uint64_t next_key_ = 1;
  Clock::time_point accept_paused_until_{};
  std::chrono::milliseconds accept_backoff_{0};
};

/// This machine and network namespace: the boot id and the namespace's id
/// ("BOOT-ID net:[4026531840]"), or empty when either cannot be read. Two processes with
/// the same identity reach the same sockets through loopback.
std::string machine_identity();

/// The agent's side: connects to the launcher at one of `targets` ("IP:PORT,..."), those
/// it can tell are the launcher's (see above; `launcher_identity` is the launcher's
/// machine_identity()), and runs the handshake both ways with `secret`, trying the next
/// address when a listener does not prove the secret. Returns the socket, which carries
/// the agent protocol from here on. Throws LaunchError naming every address tried.
UniqueFd connect_to_launcher(const std::string& targets, const std::string& secret,
                             const std::string& launcher_identity);

/// The agent's half of the handshake on the connected socket `fd`, its hello carrying
/// `text`: empty when the listener proved `secret` before `deadline`, else what went wrong.
/// `refused` is set when the listener closed the connection after the agent's proof: it
/// holds another secret.
std::string prove_to_listener(int fd, const std::string& text, const std::string& secret,
                              std::chrono::steady_clock::time_point deadline, bool& refused);

}  // namespace hvdrun::launcher
