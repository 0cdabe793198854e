// The rendezvous server the launcher runs for each job: a key-value store over TCP that
// every rank reaches with the per-job secret. Event-driven (Boost.Asio) on its own thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/pending_cap.h"
#include "common/thread_failure.h"

namespace hvdrun::rendezvous {

/// Generates a fresh per-job secret: 32 random bytes, hex-encoded (64 characters).
std::string generate_secret();

/// Limits that protect the server from clients that misbehave. Wire format and
/// authentication: docs/rendezvous-protocol.md.
struct ServerOptions {
  /// A new connection must complete the challenge-response within this time (a rank
  /// needs one round trip; the deadline only bounds how long a silent one holds a slot).
  std::chrono::milliseconds handshake_timeout{5000};
  /// Connections not yet authenticated, in all and per source address. Beyond them the
  /// oldest unauthenticated connection of the source holding the most is closed, never
  /// the newcomer, so a flood cannot keep the job's ranks out (common/pending_cap.h).
  PendingLimits unauthenticated{256, 64};
  /// Once a frame's length prefix has arrived, its body must arrive within this time.
  std::chrono::milliseconds frame_timeout{10000};
  /// An authenticated connection that sends nothing (and waits on nothing) for this long
  /// is dropped; zero keeps such connections (ranks hold theirs for the whole job).
  std::chrono::milliseconds idle_timeout{0};
  /// Largest frame body accepted; a larger length prefix drops the connection. The read
  /// buffer grows with the bytes that arrive, not with what a length prefix announces.
  std::uint32_t max_frame_bytes = 16u << 20;
  /// The store's budget: bytes of keys and values held, plus kStoreEntryOverhead per key.
  /// A set or add beyond it is refused (kBadRequest naming the budget).
  std::size_t max_store_bytes = std::size_t{512} << 20;
  /// Repeated warnings (wrong secret, accept failures, evictions): one line per cause per
  /// interval, with a count.
  std::chrono::milliseconds log_interval{10000};
};

/// What one stored key costs beyond its key and value bytes, in the store's budget.
inline constexpr std::size_t kStoreEntryOverhead = 64;

/// Counters for logs and tests (thread-safe snapshot).
struct ServerStats {
  /// Connections not yet authenticated, now.
  std::size_t unauthenticated = 0;
  /// Unauthenticated connections closed to make room for newer ones.
  std::uint64_t evicted = 0;
  /// Handshakes refused for a wrong proof of the secret.
  std::uint64_t rejected = 0;
  /// accept() failures (out of descriptors and the like).
  std::uint64_t accept_failures = 0;
  /// Bytes of the store's budget in use.
  std::size_t store_bytes = 0;
  /// Bytes held by the sessions' read buffers.
  std::size_t buffer_bytes = 0;
  /// Bytes read from clients so far.
  std::uint64_t received_bytes = 0;
  /// Connections accepted so far (a job whose hosts check in through their leaders
  /// opens one per host, runtime/world/world.h).
  std::uint64_t accepted = 0;
};

/// A running rendezvous server. Construction binds and listens; start() serves on a
/// background thread; stop() (or destruction) closes every connection and joins it.
class Server {
 public:
  /// Binds `bind_address` (an IPv4/IPv6 literal; "0.0.0.0" for all interfaces) on `port`
  /// (0 picks a free one). Throws SystemError naming address and port on failure.
  Server(const std::string& secret, const std::string& bind_address = "0.0.0.0",
         std::uint16_t port = 0);
  /// As above, with explicit limits.
  Server(const std::string& secret, const std::string& bind_address, std::uint16_t port,
         ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port actually bound.
  std::uint16_t port() const;
  /// Starts serving on a background thread.
  void start();
  /// Stops serving and joins the thread. Idempotent.
  void stop();

  /// In-process read of a key (thread-safe; the launcher uses it to report progress).
  std::optional<std::string> get(const std::string& key) const;
  /// In-process write of a key; wakes clients waiting on it (thread-safe).
  void set(const std::string& key, const std::string& value);
  /// Which of `keys` are absent right now (thread-safe), e.g. ranks not yet checked in.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  /// Number of open client connections (thread-safe).
  std::size_t connection_count() const;
  /// A snapshot of the counters (thread-safe).
  ServerStats stats() const;
  /// The I/O thread's failure: its fd() turns readable when the thread stops on an error,
  /// which get() then holds. The launcher polls it so that the job ends with that cause.
  const ThreadFailure& failure() const;
  /// Queues `fn` on the I/O thread like any handler; an exception it throws stops the
  /// server as a handler's would (tests inject failures this way).
  void post(std::function<void()> fn);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::rendezvous
