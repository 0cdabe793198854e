// Horovod's gloo-mode rendezvous, served over HTTP so that unmodified Horovod ranks
// (`import horovod.torch as hvd; hvd.init()`) find each other under hvdrun. Horovod's
// ranks speak a tiny key-value protocol: `PUT /<scope>/<key>` stores the body,
// `GET /<scope>/<key>` returns it or 404 while absent (ranks poll), `DELETE
// /<scope>/<rank>` says that rank is done with the scope. The scopes `global`,
// `local_<hostname>` and `cross_<local_rank>` have sizes known from the placement; when
// every rank of such a scope has said it is done, the scope's data is dropped. Any other
// scope (Horovod's process sets) is ad hoc: DELETE removes the key named.
//
// Boost.Beast on one I/O thread of its own. Malformed or hostile requests get a 4xx
// answer or a closed connection and never touch another client's state; bodies, headers,
// the whole store and the connection count are capped; idle connections are dropped.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_failure.h"
#include "hostfile/placement.h"

namespace hvdrun::compat {

/// Resource caps of the HTTP rendezvous. The defaults suit jobs of thousands of ranks.
struct HttpServerLimits {
  /// Largest request body accepted (413 above). Gloo's address blobs are a few KiB.
  std::size_t max_body_bytes = 8u << 20;
  /// Largest request header block accepted (431 above).
  std::size_t max_header_bytes = 8u << 10;
  /// Total bytes of values held across all scopes (507 above).
  std::size_t max_store_bytes = 1u << 30;
  /// Connections served at once; further ones are closed as soon as accepted.
  std::size_t max_connections = 8192;
  /// A connection that sends no complete request for this long is closed.
  std::chrono::milliseconds idle_timeout{30000};
};

/// Counters for logs and tests; a consistent snapshot of the server's activity.
struct HttpServerStats {
  /// Requests answered with any status.
  std::uint64_t requests = 0;
  /// Requests answered 4xx/5xx (404 for a key not yet present is not counted here).
  std::uint64_t rejected = 0;
  /// Connections closed because they were idle, unparseable or over the cap.
  std::uint64_t dropped_connections = 0;
  /// Connections open right now.
  std::size_t open_connections = 0;
  /// Scopes currently holding data.
  std::size_t scopes = 0;
  /// Bytes of values currently held.
  std::size_t stored_bytes = 0;
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
  /// Serves only clients whose source address is one of `addresses` (IPv4/IPv6
  /// literals; IPv4-mapped IPv6 sources match their IPv4 form); others are closed as soon
  /// as accepted and counted as dropped. Horovod's protocol has no room for a secret, so
  /// this is its guard when the server listens beyond loopback: pass every job host's
  /// address. Call before start(); an empty list (the default) admits everyone. Throws
  /// UsageError naming an entry that is not an address.
  void allow_only(const std::vector<std::string>& addresses);
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
