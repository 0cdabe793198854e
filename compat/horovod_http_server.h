// Horovod's gloo-mode rendezvous, served over HTTP so that unmodified Horovod ranks
// (`import horovod.torch as hvd; hvd.init()`) find each other under hvdrun. Horovod's
// ranks speak a tiny key-value protocol: `PUT /<scope>/<key>` stores the body,
// `GET /<scope>/<key>` returns it or 404 while absent (ranks poll), `DELETE
// /<scope>/<rank>` says that rank is done with the scope. The scopes `global`,
// `local_<hostname>` and `cross_<local_rank>` have sizes known from the placement; when
// every rank of such a scope has said it is done, the scope's data is dropped. Any other
// scope (Horovod's process sets) is ad hoc: DELETE removes the key named.
//
// Boost.Beast on one I/O thread of its own. Horovod's protocol has no secret, so the
// server checks who calls: a process of this host must belong to the job's user (the
// uid owning the peer's socket), another host must be one of the job's hosts; anyone
// else gets 403. Malformed or hostile requests get a 4xx answer or a closed connection
// and never touch another client's state. Keys, values and bodies in flight share one
// budget (507 beyond it); header time, pending connections and all connections are
// capped; accept failures back off (common/accept_loop.h). docs/security.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/pending_cap.h"
#include "common/thread_failure.h"
#include "hostfile/placement.h"

namespace hvdrun::compat {

/// Resource caps of the HTTP rendezvous. The defaults suit jobs of thousands of ranks.
struct HttpServerLimits {
  /// Largest request body accepted (413 above). Gloo's address blobs are a few KiB.
  std::size_t max_body_bytes = 8u << 20;
  /// Largest request header block accepted (431 above).
  std::size_t max_header_bytes = 8u << 10;
  /// The one budget for keys, values and request bodies in flight (a body's
  /// Content-Length is reserved when its header arrives): 507 beyond it.
  std::size_t max_store_bytes = 256u << 20;
  /// Connections served at once; further ones are closed as soon as accepted.
  std::size_t max_connections = 8192;
  /// Connections waiting for a complete request header, in all and per source address;
  /// beyond them the oldest such connection of the heaviest source is closed (slowloris).
  PendingLimits pending{512, 128};
  /// A request header must arrive complete within this time of the connection (or of the
  /// previous answer on a kept-alive one).
  std::chrono::milliseconds header_timeout{5000};
  /// A request body must arrive within this time of its header.
  std::chrono::milliseconds idle_timeout{30000};
  /// Repeated warnings (refused callers, accept failures): one line per cause per interval.
  std::chrono::milliseconds log_interval{10000};
};

/// Counters for logs and tests; a consistent snapshot of the server's activity.
struct HttpServerStats {
  /// Requests answered with any status.
  std::uint64_t requests = 0;
  /// Requests answered 4xx/5xx (404 for a key not yet present is not counted here).
  std::uint64_t rejected = 0;
  /// Requests refused with 403: another user of this host, or a host not in the job.
  std::uint64_t forbidden = 0;
  /// Connections without a complete header closed to make room (the pending cap).
  std::uint64_t evicted = 0;
  /// accept() failures (out of descriptors and the like).
  std::uint64_t accept_failures = 0;
  /// Connections closed because they were idle, unparseable or over the cap.
  std::uint64_t dropped_connections = 0;
  /// Connections open right now.
  std::size_t open_connections = 0;
  /// Scopes currently holding data.
  std::size_t scopes = 0;
  /// Bytes of the budget held by keys and values.
  std::size_t stored_bytes = 0;
  /// Bytes of the budget reserved for bodies in flight.
  std::size_t reserved_bytes = 0;
  /// Sized scopes (global, local_*, cross_*) whose ranks all finished and were cleared.
  std::uint64_t scopes_cleared = 0;
};

/// A running Horovod HTTP rendezvous for one job. Construction binds and listens;
/// start() serves on a background thread; stop() (or destruction) closes every
/// connection and joins the thread.
class HorovodHttpServer {
 public:
  /// Sizes the scopes from `placement` (host names as the user wrote them, which is what
  /// ranks get as HOROVOD_HOSTNAME) and binds `bind_address` (an IPv4/IPv6 literal,
  /// "0.0.0.0" for all IPv4 interfaces, "::" for all) on `port` (0 picks a free one).
  /// Throws LaunchError naming the address and port when it cannot listen.
  explicit HorovodHttpServer(const hostfile::Placement& placement,
                             const std::string& bind_address = "0.0.0.0", std::uint16_t port = 0,
                             HttpServerLimits limits = {});
  ~HorovodHttpServer();
  HorovodHttpServer(const HorovodHttpServer&) = delete;
  HorovodHttpServer& operator=(const HorovodHttpServer&) = delete;

  /// The port actually bound.
  std::uint16_t port() const;
  /// The other hosts allowed to call: IPv4/IPv6 literals, or networks as ADDRESS/PREFIX
  /// (IPv4-mapped IPv6 sources match their IPv4 form). A caller on this host is judged
  /// by its uid instead, whatever its address. Horovod's protocol has no room for a
  /// secret, so this is its guard when the server listens beyond loopback: pass every job
  /// host's address. Call before start(); with none (the default) no other host is
  /// served. Throws UsageError naming an entry that is not an address or network.
  void allow_only(const std::vector<std::string>& addresses);
  /// Adds to the allowed hosts, also while serving (an agent that reports its host's
  /// --network-interface addresses before that host's ranks start). Throws like allow_only.
  void allow_also(const std::vector<std::string>& addresses);
  /// The uid a caller on this host must have (default: this process's effective uid).
  /// Call before start().
  void serve_user(unsigned uid);
  /// Replaces how the uid behind a connected socket is found (default: local_peer_uid;
  /// nullopt means "another host"). For tests that play a remote host on loopback.
  /// Call before start().
  void judge_peers_with(std::function<std::optional<unsigned>(int)> lookup);
  /// Starts serving on a background thread. Calling it twice is a logic error (throws).
  void start();
  /// Closes the listener and every connection, and joins the thread. Idempotent.
  void stop();
  /// A snapshot of the counters; callable from any thread.
  HttpServerStats stats() const;
  /// The I/O thread's failure: its fd() turns readable when the thread stops on an error,
  /// which get() then holds. The launcher polls it so that the job ends with that cause.
  const ThreadFailure& failure() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::compat
