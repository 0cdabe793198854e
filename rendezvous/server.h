// The rendezvous server the launcher runs for each job: a key-value store over TCP that
// every rank reaches with the per-job secret. Event-driven (Boost.Asio) on its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hvdrun::rendezvous {

/// Generates a fresh per-job secret: 32 random bytes, hex-encoded (64 characters).
std::string generate_secret();

/// A running rendezvous server. Construction binds and listens; start() serves on a
/// background thread; stop() (or destruction) closes every connection and joins it.
class Server {
 public:
  /// Binds `bind_address` (an IPv4/IPv6 literal; "0.0.0.0" for all interfaces) on `port`
  /// (0 picks a free one). Throws SystemError naming address and port on failure.
  Server(std::string secret, const std::string& bind_address = "0.0.0.0", std::uint16_t port = 0);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The port actually bound.
  std::uint16_t port() const;
  /// Starts serving on a background thread.
  void start();
  /// Stops serving and joins the thread. Idempotent.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvdrun::rendezvous
