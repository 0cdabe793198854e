// The rendezvous server: one Boost.Asio io_context on one thread, one Session per client
// connection. All store state lives on that thread; in-process accessors hop onto it.
// A misbehaving client is closed alone; nothing it sends can stall another session.
// Before authentication a connection is held by the pre-authentication gate that every
// port shares (common/preauth_gate.h), may send one tiny frame and has a short deadline;
// after it, its read buffer grows only with bytes that arrive (read_buffer.h). The keys,
// their budget and the answer to each request: server_store.h.
#include "rendezvous/server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

#include "common/accept_loop.h"
#include "common/error.h"
#include "common/log.h"
#include "common/preauth_gate.h"
#include "rendezvous/protocol.h"
#include "rendezvous/read_buffer.h"
#include "rendezvous/server_store.h"

namespace hvdrun::rendezvous {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string generate_secret() { return to_hex(random_bytes(32)); }

namespace {

int listen_backlog() {
  std::ifstream f("/proc/sys/net/core/somaxconn");
  int n = 0;
  if (f >> n && n > 0) return n;
  return SOMAXCONN;
}

std::string endpoint_string(const tcp::endpoint& ep) {
  auto a = ep.address();
  if (a.is_v6()) return "[" + a.to_string() + "]:" + std::to_string(ep.port());
  return a.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

class Server::Impl {
 public:
  class Session;

  Impl(const std::string& secret, const std::string& bind_address, std::uint16_t port,
       ServerOptions opts)
      : acceptor_(io_),
        secret_(secret),
        opts_(opts),
        store_(opts.max_store_bytes),
        gate_("rendezvous", "that have not authenticated",
              PreauthPolicy{opts.handshake_timeout, opts.unauthenticated, opts.log_interval}) {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(bind_address, ec);
    std::string where = "rendezvous server on " + bind_address + ":" + std::to_string(port);
    if (ec)
      throw LaunchError(where + ": '" + bind_address +
                        "' is not an IP address literal; pass an IPv4/IPv6 address");
    tcp::endpoint ep(addr, port);
    acceptor_.open(ep.protocol(), ec);
    if (ec) throw SystemError(where, "socket", ec.value());
    acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    acceptor_.bind(ep, ec);
    if (ec) throw SystemError(where, "bind", ec.value());
    acceptor_.listen(listen_backlog(), ec);
    if (ec) throw SystemError(where, "listen", ec.value());
    port_ = acceptor_.local_endpoint().port();
  }

  ~Impl() {
    // A destructor must not throw: stop() throws only when joining the I/O thread fails
    // (std::system_error), and a server being destroyed has nothing left to do then.
    try {
      stop();
    } catch (...) {
    }
  }

  std::uint16_t port() const { return port_; }

  void start() {
    std::lock_guard lock(state_mu_);
    if (running_ || stopped_) return;
    running_ = true;
    accept();
    sweep();
    thread_ = std::thread([this] {
      try {
        io_.run();
      } catch (...) {
        // The launcher's loop polls failure_.fd() and ends the job with this cause.
        failure_.set(std::current_exception());
        hvdrun::log().debug("rendezvous server stopped unexpectedly: {}", describe(failure_.get()));
      }
    });
  }

  void stop() {
    std::lock_guard lock(state_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (running_) {
      asio::post(io_, [this] { shutdown(); });
      thread_.join();
      running_ = false;
    } else {
      shutdown();
    }
  }

  // Runs `fn` on the io thread (or directly when the thread is not running) and waits.
  template <typename Fn>
  auto on_io(Fn fn) const -> decltype(fn()) {
    std::lock_guard lock(state_mu_);
    if (!running_) return fn();
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto fut = task.get_future();
    asio::post(const_cast<asio::io_context&>(io_), [&task] { task(); });
    // A thread that has stopped on an error never runs the task: give its error instead.
    while (fut.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (failure_.failed()) {
        throw LaunchError("rendezvous server on port " + std::to_string(port_) +
                          " stopped: " + describe(failure_.get()));
      }
    }
    return fut.get();
  }

  void post(std::function<void()> fn) { asio::post(io_, std::move(fn)); }

  const ThreadFailure& failure() const { return failure_; }

  std::optional<std::string> get(const std::string& key) const {
    return on_io([&] { return store_.get(key); });
  }

  void set(const std::string& key, const std::string& value) {
    on_io([&] { store_.set(key, value); });
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    return on_io([&] {
      std::vector<std::string> out;
      for (const auto& k : keys)
        if (!store_.contains(k)) out.push_back(k);
      return out;
    });
  }

  std::size_t connection_count() const { return connections_.load(); }

  ServerStats stats() const {
    return on_io([&] {
      ServerStats st;
      st.unauthenticated = gate_.pending();
      st.evicted = gate_.evicted();
      st.rejected = gate_.refused();
      st.accept_failures = accept_loop_ ? accept_loop_->failures() : 0;
      st.store_bytes = store_.bytes();
      st.buffer_bytes = buffer_bytes_;
      st.received_bytes = received_bytes_;
      st.accepted = accepted_;
      return st;
    });
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  Hmac secret_;
  ServerOptions opts_;
  std::uint16_t port_ = 0;

  ServerStore store_;
  std::unordered_set<std::shared_ptr<Session>> sessions_;
  std::atomic<std::size_t> connections_{0};
  bool shutting_down_ = false;
  std::size_t buffer_bytes_ = 0;  // all sessions' read buffers
  std::uint64_t received_bytes_ = 0;
  std::uint64_t accepted_ = 0;
  PreauthGate gate_;

 private:
  void accept();
  void shutdown();
  void sweep();

  mutable std::mutex state_mu_;
  bool running_ = false;
  bool stopped_ = false;
  ThreadFailure failure_;
  std::thread thread_;
  std::optional<AcceptLoop> accept_loop_;
  std::unique_ptr<asio::steady_timer> sweep_timer_;
};

class Server::Impl::Session final : public std::enable_shared_from_this<Session>, public KeyWaiter {
 public:
  Session(Impl& srv, tcp::socket sock) : srv_(srv), sock_(std::move(sock)), wait_timer_(srv.io_) {
    boost::system::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : endpoint_string(ep);
    // The unit of the cap: the user of a process on this host (so another local user's
    // flood never pushes out the job's ranks), else the remote address.
    source_ = connection_source(sock_.native_handle());
    sock_.set_option(tcp::no_delay(true), ec);
  }

  void start() {
    // Counted among the unauthenticated until the handshake succeeds; a flood of newer
    // ones closes the oldest of the heaviest source first.
    pending_id_ = srv_.gate_.enter(source_, [w = weak_from_this()] {
      if (auto s = w.lock()) s->close("closed to make room: too many unauthenticated connections");
    });
    server_nonce_ = random_bytes(kMacBytes);
    send(plain_frame(std::string(kGreeting) + server_nonce_));
    arm(srv_.opts_.handshake_timeout, "did not complete authentication in time");
    read_header();
  }

  // Closes the connection; `reason` goes to the debug log.
  void close(const std::string& reason) {
    if (closed_) return;
    closed_ = true;
    waiting_ = false;
    hvdrun::log().debug("rendezvous: dropping client {}: {}", peer_, reason);
    srv_.gate_.leave(pending_id_);
    rbuf_.release();
    boost::system::error_code ec;
    deadline_ = kNever;
    wait_timer_.cancel();
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    srv_.connections_.fetch_sub(1);
    srv_.sessions_.erase(shared_from_this());
  }

  // Server shutdown: a client blocked in wait() is told so before its connection closes.
  void shutdown() {
    if (closed_) return;
    if (waiting_ && codec_) {
      Response r;
      r.status = Status::kStopping;
      r.message = "rendezvous server stopped while this client waited (the job is ending)";
      auto frame = codec_->seal(encode(r));
      boost::system::error_code ec;
      asio::write(sock_, asio::buffer(frame), ec);
    }
    close("server stopping");
  }

  // A key this session waits for appeared.
  void key_arrived(std::uint64_t wait_id) override {
    if (closed_ || !waiting_ || wait_id != wait_id_) return;
    if (--wait_missing_ == 0) check_wait();
  }

 private:
  // Sets (or with d <= 0 clears) the deadline the server's sweep enforces. A plain time
  // stamp instead of a timer per frame: re-arming an Asio timer costs syscalls on every
  // request, the sweep costs one wake-up per interval for all sessions.
  void arm(std::chrono::milliseconds d, const char* why) {
    if (d.count() <= 0) {
      deadline_ = kNever;
      return;
    }
    deadline_ = Clock::now() + d;
    deadline_why_ = why;
  }

 public:
  // Called by the sweep: closes the session when its deadline has passed.
  void expire(Clock::time_point now) {
    if (!closed_ && deadline_ <= now) close(deadline_why_);
  }

 private:
  // Reading is buffered: one read_some brings whatever the client sent (usually a whole
  // request), and every complete frame in the buffer is handled before the next read.
  void read_header() { process(); }

  void process() {
    if (closed_ || processing_) return;
    processing_ = true;
    bool keep = parse_frames();
    processing_ = false;
    if (!keep || closed_) return;
    if (codec_) {
      if (rbuf_.available() > 0) {
        if (!partial_armed_) arm(srv_.opts_.frame_timeout, "sent a partial frame and stalled");
        partial_armed_ = true;
      } else if (waiting_) {
        arm(std::chrono::milliseconds(0), "");  // the wait has its own deadline
      } else {
        arm(srv_.opts_.idle_timeout, "idle for longer than the idle timeout");
      }
    }
    read_more();
  }

  // Handles every complete frame in the buffer. False when the session must stop reading.
  bool parse_frames() {
    for (;;) {
      std::size_t avail = rbuf_.available();
      if (avail < 4) return true;
      auto len = get_u32(rbuf_.data());
      // The only handshake message a client sends is nonce + proof.
      std::uint32_t cap = codec_ ? srv_.opts_.max_frame_bytes : 2 * kMacBytes;
      if (len > cap || len < (codec_ ? kMacBytes : 2 * kMacBytes)) {
        close("frame of " + std::to_string(len) + " bytes outside the allowed range (limit " +
              std::to_string(cap) + ")");
        return false;
      }
      if (avail < 4 + std::size_t{len}) return true;  // read_more() makes room as bytes come
      std::string_view body(rbuf_.data() + 4, len);
      rbuf_.consume(4 + std::size_t{len});
      partial_armed_ = false;
      if (!on_frame(body) || closed_ || close_after_write_) return false;
    }
  }

  void read_more() {
    if (reading_ || closed_) return;
    const auto [room, room_size] = rbuf_.room(codec_.has_value());
    reading_ = true;
    sock_.async_read_some(
        asio::buffer(room, room_size),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->reading_ = false;
          if (self->closed_) return;
          if (ec) {
            self->close(ec == asio::error::eof ? "disconnected" : "read: " + ec.message());
            return;
          }
          self->rbuf_.received(n);
          self->srv_.received_bytes_ += n;
          self->process();
        });
  }

  // One complete frame. False when the session must stop reading.
  bool on_frame(std::string_view body) {
    if (!codec_) return on_handshake(body);
    std::string payload;
    Request req;
    try {
      payload = codec_->open(body);
      req = decode_request(payload);
    } catch (const ProtocolError& e) {
      close(std::string("protocol error: ") + e.what());
      return false;
    }
    if (waiting_) {
      close("sent a request while its wait was pending");
      return false;
    }
    handle(req);
    return true;
  }

  bool on_handshake(std::string_view b) {
    auto client_nonce = b.substr(0, kMacBytes);
    auto proof = b.substr(kMacBytes, kMacBytes);
    auto expected = Handshake::client_proof(srv_.secret_, server_nonce_, client_nonce);
    if (!tags_equal(reinterpret_cast<const unsigned char*>(expected.data()),
                    reinterpret_cast<const unsigned char*>(proof.data()))) {
      close_after_write_ = true;
      send(plain_frame(std::string(1, '\x01') +
                       "authentication failed: the client does not hold this job's secret"));
      srv_.gate_.refuse("wrong job secret",
                        "rendezvous: rejected client " + peer_ + ": wrong job secret");
      return false;
    }
    srv_.gate_.leave(std::exchange(pending_id_, 0));
    send(plain_frame(std::string(1, '\0') +
                     Handshake::server_proof(srv_.secret_, server_nonce_, client_nonce)));
    codec_.emplace(Handshake::session_key(srv_.secret_, server_nonce_, client_nonce), true);
    arm(std::chrono::milliseconds(0), "");
    return true;
  }

  void respond(const Response& r) { send(codec_->seal(encode(r))); }

  void handle(Request& req) {
    if (req.op == Op::kWait) {
      begin_wait(req);
      return;
    }
    respond(srv_.store_.apply(req));
  }

  void begin_wait(Request& req) {
    wait_keys_ = std::move(req.keys);
    waiting_ = true;
    ++wait_id_;
    if (req.timeout_ms > 0) {
      wait_timer_.expires_after(std::chrono::milliseconds(req.timeout_ms));
      wait_timer_.async_wait(
          [self = shared_from_this(), id = wait_id_](const boost::system::error_code& ec) {
            if (ec || !self->waiting_ || self->wait_id_ != id) return;
            self->finish_wait(true);
          });
    }
    check_wait();
    if (waiting_ && req.timeout_ms == 0) finish_wait(true);
  }

  // Registers on every absent key, or answers when none is absent.
  void check_wait() {
    std::size_t absent = 0;
    for (const auto& k : wait_keys_) {
      if (srv_.store_.contains(k)) continue;
      ++absent;
      srv_.store_.wait_for(k, weak_from_this(), wait_id_);
    }
    wait_missing_ = absent;
    if (absent == 0) finish_wait(false);
  }

  void finish_wait(bool timed_out) {
    waiting_ = false;
    wait_timer_.cancel();
    Response r;
    if (timed_out) {
      r.status = Status::kTimeout;
      for (std::uint32_t i = 0; i < wait_keys_.size(); ++i)
        if (!srv_.store_.contains(wait_keys_[i])) r.missing.push_back(i);
      if (r.missing.empty()) r.status = Status::kOk;  // arrived in the same instant
    }
    wait_keys_.clear();
    respond(r);
    read_header();  // re-arm the idle timer now that the wait is over
  }

  void send(std::string frame) {
    outq_.push_back(std::move(frame));
    if (!writing_) write_next();
  }

  void write_next() {
    writing_ = true;
    asio::async_write(
        sock_, asio::buffer(outq_.front()),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          self->outq_.pop_front();
          self->writing_ = false;
          if (self->closed_) return;
          if (ec) {
            self->close("write: " + ec.message());
          } else if (!self->outq_.empty()) {
            self->write_next();
          } else if (self->close_after_write_) {
            self->close("authentication failed");
          }
        });
  }

  Impl& srv_;
  tcp::socket sock_;
  static constexpr Clock::time_point kNever = Clock::time_point::max();
  Clock::time_point deadline_ = kNever;
  const char* deadline_why_ = "";
  asio::steady_timer wait_timer_;
  std::string peer_;
  std::string source_;  // the peer's uid (on this host) or address: the pending cap's unit
  PendingCap::Id pending_id_ = 0;
  std::string server_nonce_;
  std::optional<FrameCodec> codec_;
  ReadBuffer rbuf_{srv_.buffer_bytes_};
  bool processing_ = false;
  bool partial_armed_ = false;
  std::deque<std::string> outq_;
  bool writing_ = false;
  bool reading_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool waiting_ = false;
  std::uint64_t wait_id_ = 0;
  std::size_t wait_missing_ = 0;
  std::vector<std::string> wait_keys_;
};

void Server::Impl::accept() {
  accept_loop_.emplace(
      acceptor_, "rendezvous server on port " + std::to_string(port_),
      [this](tcp::socket sock) {
        if (shutting_down_) return;
        auto s = std::make_shared<Session>(*this, std::move(sock));
        sessions_.insert(s);
        connections_.fetch_add(1);
        ++accepted_;
        s->start();
      },
      gate_.log());
  accept_loop_->start();
}

// Enforces handshake, frame and idle deadlines of all sessions, a few times per the
// shortest timeout.
void Server::Impl::sweep() {
  auto shortest = std::chrono::milliseconds(1000);
  for (auto d : {opts_.handshake_timeout, opts_.frame_timeout, opts_.idle_timeout})
    if (d.count() > 0) shortest = std::min(shortest, d);
  auto interval =
      std::clamp(shortest / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(250));
  if (!sweep_timer_) sweep_timer_ = std::make_unique<asio::steady_timer>(io_);
  sweep_timer_->expires_after(interval);
  sweep_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    auto now = Clock::now();
    std::vector<std::shared_ptr<Session>> all(sessions_.begin(), sessions_.end());
    for (auto& s : all) s->expire(now);
    sweep();
  });
}

void Server::Impl::shutdown() {
  shutting_down_ = true;
  boost::system::error_code ec;
  acceptor_.close(ec);
  if (accept_loop_) accept_loop_->stop();
  if (sweep_timer_) sweep_timer_->cancel();
  auto all = sessions_;
  for (auto& s : all) s->shutdown();
  sessions_.clear();
  store_.clear_waiters();
  gate_.flush();
  io_.stop();
}

Server::Server(const std::string& secret, const std::string& bind_address, std::uint16_t port)
    : Server(secret, bind_address, port, ServerOptions{}) {}

Server::Server(const std::string& secret, const std::string& bind_address, std::uint16_t port,
               ServerOptions options)
    : impl_(std::make_unique<Impl>(secret, bind_address, port, options)) {}

Server::~Server() = default;
std::uint16_t Server::port() const { return impl_->port(); }
void Server::start() { impl_->start(); }
void Server::stop() { impl_->stop(); }
std::optional<std::string> Server::get(const std::string& key) const { return impl_->get(key); }
void Server::set(const std::string& key, const std::string& value) { impl_->set(key, value); }
std::vector<std::string> Server::missing(const std::vector<std::string>& keys) const {
  return impl_->missing(keys);
}
std::size_t Server::connection_count() const { return impl_->connection_count(); }
ServerStats Server::stats() const { return impl_->stats(); }
const ThreadFailure& Server::failure() const { return impl_->failure(); }
void Server::post(std::function<void()> fn) { impl_->post(std::move(fn)); }

}  // namespace hvdrun::rendezvous
