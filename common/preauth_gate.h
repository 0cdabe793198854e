// The pre-authentication policy every listening port of hvdrun shares: the rendezvous
// server, Horovod's HTTP rendezvous and the Slurm agents' connect-back (hvdrun.run's
// collector, in Python, follows the same rules: python/hvdrun/_preauth.py).
//
// A connection is pending until it has shown that it belongs to the job. Pending
// connections run their handshakes without blocking anyone else, each within a short
// deadline; they are capped in all and per source (the uid behind a peer on this host, the
// address of a remote one). Beyond a source's cap its oldest pending connection is closed;
// beyond the total cap, the oldest pending connection among those of the sources holding
// the most (ties between sources settled by age, never by hash order), and never the
// newcomer (common/pending_cap.h states the rule). Every warning an
// outsider can cause goes through one LogLimiter: the first line of a cause, then at most
// one per interval that says how many were held back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/log_limiter.h"
#include "common/pending_cap.h"

namespace hvdrun {

/// The limits of a PreauthGate.
struct PreauthPolicy {
  /// A pending connection must have authenticated within this time (one round trip for
  /// the job's own peers; the deadline only bounds how long a silent one holds a place).
  std::chrono::milliseconds handshake_timeout{5000};
  /// Pending connections in all and per source.
  PendingLimits limits{256, 64};
  /// Warnings an outsider can cause: one line per cause per interval, with a count.
  std::chrono::milliseconds log_interval{10000};
};

/// The pending cap's unit for the connected TCP socket `fd`: "uid N on this host" when
/// the other end is a socket on this host, else the peer's address ("10.0.0.7"), or
/// "unknown peer". Does not throw.
std::string connection_source(int fd);

/// The gate of one listening port. Single-threaded except for log(), which is
/// thread-safe: used on the port's I/O thread.
class PreauthGate {
 public:
  using Clock = std::chrono::steady_clock;

  /// `port` names the port in warnings ("rendezvous", "Slurm agents' port 4000");
  /// `pending_means` says what a pending connection has not done yet ("that have not
  /// authenticated").
  PreauthGate(std::string port, std::string pending_means, PreauthPolicy policy);

  /// Tracks a new pending connection from `source`. When that breaks a limit, an older
  /// pending connection is closed through its `close` (PendingCap::add: the source's own
  /// oldest, or the oldest among those of the sources holding the most; never this one),
  /// with a rate-limited warning naming the source. Returns the id.
  PendingCap::Id enter(const std::string& source, std::function<void()> close);
  /// The connection passed the gate, or closed; unknown ids are ignored.
  void leave(PendingCap::Id id);
  /// A connection failed authentication: counted, and `message` written through the
  /// rate limiter under `cause`.
  void refuse(const std::string& cause, const std::string& message);

  /// When a connection that arrives at `now` must have authenticated.
  Clock::time_point deadline(Clock::time_point now) const {
    return now + policy_.handshake_timeout;
  }

  /// The port's rate-limited warnings (for its other outsider-caused messages).
  LogLimiter& log() { return log_; }
  /// The limits in force.
  const PreauthPolicy& policy() const { return policy_; }
  /// Pending connections now.
  std::size_t pending() const { return cap_.size(); }
  /// Pending connections from `source` now.
  std::size_t pending_from(const std::string& source) const { return cap_.from(source); }
  /// Pending connections closed to make room so far.
  std::uint64_t evicted() const { return cap_.evicted(); }
  /// Connections refused so far.
  std::uint64_t refused() const { return refused_; }
  /// Writes the counts of warnings still held back (at the port's shutdown).
  void flush() { log_.flush(port_); }

 private:
  std::string port_;
  std::string pending_means_;
  PreauthPolicy policy_;
  LogLimiter log_;
  PendingCap cap_;
  std::uint64_t refused_ = 0;
};

}  // namespace hvdrun
