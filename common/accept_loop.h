// The accept loop both servers of the launcher use (the rendezvous over TCP and Horovod's
// HTTP rendezvous), so that they behave alike when accept fails: out of descriptors
// (EMFILE, ENFILE) or memory, the loop waits with a doubling backoff (10 ms up to 500 ms)
// instead of spinning, keeps serving the connections it has, and logs through a
// LogLimiter (one line per cause per interval, with a count).
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/log_limiter.h"

namespace hvdrun {

/// Accepts connections on an acceptor forever, handing each socket to a callback. Lives on
/// the acceptor's I/O thread; the owner closes the acceptor and calls stop() to end it.
class AcceptLoop {
 public:
  /// A new connection.
  using OnSocket = std::function<void(boost::asio::ip::tcp::socket)>;

  /// `who` names the server in log lines ("rendezvous server on port 4000"); warnings go
  /// through `log`, which must outlive the loop.
  AcceptLoop(boost::asio::ip::tcp::acceptor& acceptor, std::string who, OnSocket on_socket,
             LogLimiter& log);
  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;

  /// Starts accepting.
  void start();
  /// Stops: no further accept is started and a pending backoff is cancelled.
  void stop();

  /// Accept failures so far.
  std::uint64_t failures() const { return failures_.load(); }
  /// The wait before the next accept after a failure (zero after a success).
  std::chrono::milliseconds backoff() const { return backoff_; }

  /// First and largest wait after a failure.
  static constexpr std::chrono::milliseconds kFirstBackoff{10};
  /// Largest wait after repeated failures.
  static constexpr std::chrono::milliseconds kMaxBackoff{500};

 private:
  void accept_next();
  void on_failure(const boost::system::error_code& ec);

  boost::asio::ip::tcp::acceptor& acceptor_;
  std::string who_;
  OnSocket on_socket_;
  LogLimiter& log_;
  boost::asio::steady_timer retry_;
  std::chrono::milliseconds backoff_{0};
  std::atomic<std::uint64_t> failures_{0};
  bool stopped_ = false;
};

}  // namespace hvdrun
