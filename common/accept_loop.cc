// AcceptLoop: accept, and on failure back off instead of spinning (accept_loop.h).
#include "common/accept_loop.h"

#include <algorithm>
#include <utility>

namespace hvdrun {

namespace asio = boost::asio;

AcceptLoop::AcceptLoop(asio::ip::tcp::acceptor& acceptor, std::string who, OnSocket on_socket,
                       LogLimiter& log)
    : acceptor_(acceptor),
      who_(std::move(who)),
      on_socket_(std::move(on_socket)),
      log_(log),
      retry_(acceptor.get_executor()) {}

void AcceptLoop::start() {
  stopped_ = false;
  accept_next();
}

void AcceptLoop::stop() {
  stopped_ = true;
  retry_.cancel();
}

void AcceptLoop::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, asio::ip::tcp::socket s) {
    if (stopped_ || ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) return on_failure(ec);
    backoff_ = std::chrono::milliseconds(0);
    on_socket_(std::move(s));
    if (!stopped_) accept_next();
  });
}

// The pending connection stays in the listen queue: accepting again at once would fail
// again at once (a busy loop), so wait, longer each time, until a descriptor is free.
void AcceptLoop::on_failure(const boost::system::error_code& ec) {
  ++failures_;
  backoff_ = std::clamp(backoff_ * 2, kFirstBackoff, kMaxBackoff);
  log_.warn("accept: " + ec.message(),
            who_ + ": accept failed: " + ec.message() +
                "; serving the connections it has and retrying with backoff (up to " +
                std::to_string(kMaxBackoff.count()) + " ms)");
  retry_.expires_after(backoff_);
  retry_.async_wait([this](const boost::system::error_code& e) {
    if (!e && !stopped_) accept_next();
  });
}

}  // namespace hvdrun
