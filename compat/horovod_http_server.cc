// Horovod's HTTP rendezvous on Boost.Beast: one I/O thread and one session object per
// connection; what a request means is horovod_http_handler.cc's business. Who may ask is
// decided here, once per connection at accept: the uid behind a local peer, the address
// of a remote one.
#include "compat/horovod_http_server.h"

#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/accept_loop.h"
#include "common/error.h"
#include "common/log.h"
#include "common/preauth_gate.h"
#include "common/socket_owner.h"
#include "compat/horovod_http_handler.h"

namespace hvdrun::compat {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

/// ::ffff:a.b.c.d compares as a.b.c.d.
asio::ip::address normalize(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  return a;
}

/// An allowed host (prefix = full length) or network.
struct Network {
  asio::ip::address address;
  unsigned prefix = 0;

  bool contains(const asio::ip::address& a) const {
    if (a.is_v4() != address.is_v4()) return false;
    auto x = a.is_v4() ? a.to_v4().to_bytes() : std::array<unsigned char, 4>{};
    auto y = address.is_v4() ? address.to_v4().to_bytes() : std::array<unsigned char, 4>{};
    if (a.is_v4()) return leading_bits_equal(x.data(), y.data());
    auto x6 = a.to_v6().to_bytes();
    auto y6 = address.to_v6().to_bytes();
    return leading_bits_equal(x6.data(), y6.data());
  }

  bool leading_bits_equal(const unsigned char* x, const unsigned char* y) const {
    unsigned bits = prefix;
    for (std::size_t i = 0; bits > 0; ++i, bits -= std::min(bits, 8u)) {
      const unsigned n = std::min(bits, 8u);
      const auto mask = static_cast<unsigned char>(0xffu << (8 - n));
      if ((x[i] & mask) != (y[i] & mask)) return false;
    }
    return true;
  }
};

/// Parses "ADDRESS" or "ADDRESS/PREFIX"; throws UsageError naming the entry.
Network parse_network(const std::string& entry) {
  const auto slash = entry.find('/');
  boost::system::error_code ec;
  auto address = asio::ip::make_address(entry.substr(0, slash), ec);
  const auto bad = [&] {
    return UsageError("Horovod rendezvous: allowed client '" + entry +
                      "' is not an IPv4 or IPv6 address (or ADDRESS/PREFIX network)");
  };
  if (ec) throw bad();
  address = normalize(address);
  const unsigned full = address.is_v4() ? 32 : 128;
  unsigned prefix = full;
  if (slash != std::string::npos) {
    const std::string digits = entry.substr(slash + 1);
    if (digits.empty() || digits.size() > 3 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      throw bad();
    prefix = static_cast<unsigned>(std::stoul(digits));
    if (prefix > full) throw bad();
  }
  return Network{address, prefix};
}

/// Whether a connection may be served, and if not, why (for the 403 and the log).
struct Verdict {
  bool allowed = true;
  std::string cause;   // the log limiter's cause
  std::string reason;  // what the log line and the 403 say
  std::string source;  // the pending cap's unit: a local uid or a remote address
  bool retry = false;  // not allowed for now (503), rather than forbidden (403)
};

}  // namespace

class HorovodHttpServer::Impl {
 public:
  class Session;

  Impl(const hostfile::Placement& placement, const std::string& bind_address, std::uint16_t port,
       HttpServerLimits limits)
      : limits_(limits),
        store_(placement, limits.max_store_bytes),
        gate_("Horovod rendezvous", "without a complete request",
              PreauthPolicy{limits.header_timeout, limits.pending, limits.log_interval}),
        uid_(::geteuid()),
        peer_owner_([](int fd) { return local_peer_owner(fd); }) {
    const std::string where =
        "Horovod rendezvous: cannot listen on " +
        (bind_address.find(':') != std::string::npos ? "[" + bind_address + "]" : bind_address) +
        ":" + std::to_string(port);
    boost::system::error_code ec;
    auto address = asio::ip::make_address(bind_address, ec);
    if (ec) throw LaunchError(where + ": not an IP address; pass an IPv4 or IPv6 literal");
    tcp::endpoint endpoint(address, port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw LaunchError(where + ": " + ec.message() +
                        "; choose another address/port or free this one");
    }
    port_ = acceptor_.local_endpoint().port();
  }

  ~Impl() { stop(); }

  std::uint16_t port() const { return port_; }

  void allow_only(const std::vector<std::string>& addresses) {
    if (started_) throw std::logic_error("HorovodHttpServer::allow_only after start");
    std::vector<Network> parsed;
    for (const auto& a : addresses) parsed.push_back(parse_network(a));
    const std::lock_guard<std::mutex> lock(allowed_mutex_);
    allowed_ = std::move(parsed);
  }

  void allow_also(const std::vector<std::string>& addresses) {
    std::vector<Network> parsed;
    for (const auto& a : addresses) parsed.push_back(parse_network(a));
    const std::lock_guard<std::mutex> lock(allowed_mutex_);
    allowed_.insert(allowed_.end(), parsed.begin(), parsed.end());
  }

  void serve_user(uid_t uid) {
    if (started_) throw std::logic_error("HorovodHttpServer::serve_user after start");
    uid_ = uid;
  }

  void judge_peers_with(std::function<std::optional<uid_t>(int)> lookup) {
    // nullopt plays another host.
    if (started_) throw std::logic_error("HorovodHttpServer::judge_peers_with after start");
    peer_owner_ = [lookup = std::move(lookup)](int fd) {
      auto uid = lookup(fd);
      return uid ? PeerOwner{PeerKind::local, *uid} : PeerOwner{PeerKind::remote, 0};
    };
  }

  // A caller on this host is judged by the uid owning its socket, whatever address it
  // uses (loopback, the --network-interface address); another host by its address.
  Verdict judge(tcp::socket& socket) const {
    boost::system::error_code ec;
    auto peer = socket.remote_endpoint(ec);
    if (ec) return {false, "no peer", "the peer is gone", "?"};
    const auto addr = normalize(peer.address());
    const PeerOwner owner = peer_owner_(socket.native_handle());
    if (owner.kind == PeerKind::unknown) {
      // Out of descriptors for the lookup, say: neither served nor told it is forbidden.
      return {false, "unknown caller",
              "a caller at " + addr.to_string() + " that cannot be identified right now",
              addr.to_string(), /*retry=*/true};
    }
    if (owner.kind == PeerKind::local) {
      const std::string source = "uid " + std::to_string(owner.uid) + " on this host";
      if (owner.uid == uid_) return {true, {}, {}, source};
      return {false, "another user",
              "a process of uid " + std::to_string(owner.uid) +
                  " on this host (the job runs as uid " + std::to_string(uid_) + ")",
              source};
    }
    {
      const std::lock_guard<std::mutex> lock(allowed_mutex_);
      for (const auto& n : allowed_) {
        if (n.contains(addr)) return {true, {}, {}, addr.to_string()};
      }
    }
    return {false, "another host",
            "host " + addr.to_string() + ", which is not one of the job's hosts", addr.to_string()};
  }

  void start() {
    if (started_.exchange(true)) throw std::logic_error("HorovodHttpServer::start called twice");
    accept_loop_.emplace(
        acceptor_, "Horovod rendezvous on port " + std::to_string(port_),
        [this](tcp::socket socket) { on_accept(std::move(socket)); }, gate_.log());
    accept_loop_->start();
    thread_ = std::thread([this] {
      try {
        io_.run();
      } catch (...) {
        // The launcher's loop polls failure_.fd() and ends the job with this cause.
        failure_.set(std::current_exception());
        hvdrun::log().debug("Horovod rendezvous: I/O thread stopped: {}", describe(failure_.get()));
      }
    });
  }

  const ThreadFailure& failure() const { return failure_; }

  void stop() {
    if (stopped_.exchange(true)) return;
    if (thread_.joinable()) {
      asio::post(io_, [this] { close_all(); });
      thread_.join();
    } else {
      close_all();
    }
  }

  HttpServerStats stats() const {
    HttpServerStats s;
    s.requests = requests_.load();
    s.rejected = rejected_.load();
    s.forbidden = forbidden_.load();
    s.evicted = evicted_.load();
    s.accept_failures = started_ && accept_loop_ ? accept_loop_->failures() : 0;
    s.dropped_connections = dropped_.load();
    s.open_connections = open_.load();
    const auto store = store_.stats();
    s.scopes = store.scopes;
    s.stored_bytes = store.stored_bytes;
    s.reserved_bytes = store.reserved_bytes;
    s.scopes_cleared = store.scopes_cleared;
    return s;
  }

  const HttpServerLimits& limits() const { return limits_; }
  HorovodStore& store() { return store_; }
  LogLimiter& log() { return gate_.log(); }
  PreauthGate& gate() { return gate_; }
  void count_forbidden() { ++forbidden_; }
  void count_evicted() {
    ++evicted_;
    ++dropped_;
  }

  void count_request(http::status status) {
    ++requests_;
    if (static_cast<unsigned>(status) >= 400 && status != http::status::not_found) ++rejected_;
  }
  void count_drop() { ++dropped_; }
  void forget(Session* s) {
    sessions_.erase(s);
    open_ = sessions_.size();
  }

 private:
  void on_accept(tcp::socket socket);
  void close_all();

  HttpServerLimits limits_;
  // allow_also() adds to it from the launcher's thread while the I/O thread judges.
  mutable std::mutex allowed_mutex_;
  std::vector<Network> allowed_;
  HorovodStore store_;
  // Declared before io_, like sessions_: sessions still alive when io_ goes use them.
  PreauthGate gate_;
  uid_t uid_;
  std::function<PeerOwner(int)> peer_owner_;
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> forbidden_{0};
  std::atomic<std::uint64_t> evicted_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::size_t> open_{0};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  // Sessions alive now; touched only on the I/O thread (or after it has been joined).
  // Declared before io_ so that it outlives the handlers io_ destroys.
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::optional<AcceptLoop> accept_loop_;
  std::uint16_t port_ = 0;
  ThreadFailure failure_;
  std::thread thread_;
};

/// One client connection: read a request, answer it, repeat while keep-alive holds.
class HorovodHttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket, Verdict verdict)
      : server_(server),
        stream_(std::move(socket)),
        verdict_(std::move(verdict)),
        source_(verdict_.source) {}
  ~Session() {
    server_.store().release(reserved_);
    server_.gate().leave(pending_id_);
    server_.forget(this);
  }

  void run() { read_header(); }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

 private:
  // Until its header is complete a connection is pending: capped with the others, the
  // oldest of the heaviest source closed first, and held to the header deadline.
  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.limits().max_header_bytes));
    parser_->body_limit(server_.limits().max_body_bytes);
    pending_id_ = server_.gate().enter(source_, [w = weak_from_this(), &srv = server_] {
      auto self = w.lock();
      if (!self) return;
      srv.count_evicted();
      self->close();
    });
    stream_.expires_after(server_.limits().header_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    server_.gate().leave(std::exchange(pending_id_, 0));
    if (ec) return on_error(ec);
    if (!verdict_.allowed) return refuse();
    auto& req = parser_->get();
    if (!parser_->is_done() && !reserve_body()) return;
    // A client that announces a body and waits for the go-ahead (curl does) gets it.
    if (req[http::field::expect] == "100-continue" && !parser_->is_done()) {
      continue_ = std::make_shared<http::response<http::empty_body>>(http::status::continue_,
                                                                     req.version());
      http::async_write(stream_, *continue_,
                        [self = shared_from_this()](beast::error_code wec, std::size_t) {
                          if (wec) return self->on_error(wec);
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  // The body's bytes come out of the one budget before they are read: its announced
  // length, or the body cap when chunked. False when it was refused (413 or 507 sent).
  bool reserve_body() {
    auto length = parser_->content_length();
    const std::size_t want =
        length ? static_cast<std::size_t>(*length) : server_.limits().max_body_bytes;
    if (want > server_.limits().max_body_bytes) {
      respond(http::status::payload_too_large, "request body too large\n", false);
      return false;
    }
    if (!server_.store().reserve(want)) {
      respond(http::status::insufficient_storage,
              "rendezvous store is full: its budget of " +
                  std::to_string(server_.limits().max_store_bytes) +
                  " bytes (keys, values and bodies in flight) is used up\n",
              false);
      return false;
    }
    reserved_ = want;
    return true;
  }

  void refuse() {
    if (verdict_.retry) {
      server_.log().warn(verdict_.cause, "Horovod rendezvous: cannot tell who is calling: " +
                                             verdict_.reason + "; answered 503");
      respond(http::status::service_unavailable,
              "the rendezvous cannot identify this caller right now; retry\n", false);
      return;
    }
    server_.count_forbidden();
    server_.log().warn(verdict_.cause, "Horovod rendezvous: refused a request from " +
                                           verdict_.reason +
                                           "; only the job's own processes are served");
    respond(http::status::forbidden,
            "this rendezvous serves only the processes of its job (" + verdict_.reason + ")\n",
            false);
  }

  void read_body() {
    stream_.expires_after(server_.limits().idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) {
                       if (ec) return self->on_error(ec);
                       self->handle();
                     });
  }

  void on_error(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      return;  // the client hung up, or the server is stopping
    }
    if (ec == http::error::body_limit) {
      return respond(http::status::payload_too_large, "request body too large\n", false);
    }
    if (ec == http::error::header_limit) {
      return respond(http::status::request_header_fields_too_large, "request header too large\n",
                     false);
    }
    if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::partial_message) {
      hvdrun::log().debug("Horovod rendezvous: unparseable request from {}: {}", peer(),
                          ec.message());
      return respond(http::status::bad_request, "malformed HTTP request\n", false);
    }
    hvdrun::log().debug("Horovod rendezvous: dropping connection from {}: {}", peer(),
                        ec.message());
    server_.count_drop();
  }

  void handle() {
    auto& req = parser_->get();
    const bool keep_alive = req.keep_alive();
    const auto verb = req.method_string();
    const auto method = parse_http_method(std::string_view(verb.data(), verb.size()));
    // The body is read: its reservation turns into what the store holds, if it keeps it.
    server_.store().release(std::exchange(reserved_, 0));
    auto reply = handle_horovod_request(server_.store(), method,
                                        std::string_view(req.target().data(), req.target().size()),
                                        std::move(req.body()));
    respond(static_cast<http::status>(reply.status), std::move(reply.body), keep_alive);
  }

  void respond(http::status status, std::string body, bool keep_alive) {
    server_.count_request(status);
    server_.store().release(std::exchange(reserved_, 0));
    const unsigned version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
    response_ = std::make_shared<http::response<http::string_body>>(status, version);
    if (status == http::status::method_not_allowed)
      response_->set(http::field::allow, "GET, PUT, DELETE");
    if (status == http::status::ok && !body.empty()) {
      response_->set(http::field::content_type, "application/octet-stream");
    }
    if (parser_ && parser_->is_header_done() && parser_->get().method() == http::verb::head) {
      body.clear();  // a HEAD answer carries no body
    }
    response_->body() = std::move(body);
    response_->keep_alive(keep_alive);
    response_->prepare_payload();
    stream_.expires_after(server_.limits().idle_timeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                        if (ec) return self->on_error(ec);
                        if (keep_alive) return self->read_header();
                        self->linger();
                      });
  }

  // After a final answer: half-close, then read and discard what the client still sends
  // (an unread body) until it closes or the header deadline passes, so that closing does
  // not reset the connection before the client has read the answer.
  void linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(server_.limits().header_timeout);
    drain_ = std::make_shared<std::array<char, 4096>>();
    stream_.async_read_some(asio::buffer(*drain_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (!ec) self->linger_more();
                            });
  }

  void linger_more() {
    stream_.async_read_some(asio::buffer(*drain_),
                            [self = shared_from_this()](beast::error_code ec, std::size_t) {
                              if (!ec) self->linger_more();
                            });
  }

  std::string peer() const {
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (ec) return "?";
    return ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  Impl& server_;
  beast::tcp_stream stream_;
  Verdict verdict_;
  std::string source_;
  PendingCap::Id pending_id_ = 0;
  std::size_t reserved_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::empty_body>> continue_;
  std::shared_ptr<http::response<http::string_body>> response_;
  std::shared_ptr<std::array<char, 4096>> drain_;
};

void HorovodHttpServer::Impl::on_accept(tcp::socket socket) {
  if (stopped_) return;
  if (sessions_.size() >= limits_.max_connections) {
    ++dropped_;
    beast::error_code ignored;
    socket.close(ignored);
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  Verdict verdict = judge(socket);
  auto session = std::make_shared<Session>(*this, std::move(socket), std::move(verdict));
  sessions_.emplace(session.get(), session);
  open_ = sessions_.size();
  session->run();
}

void HorovodHttpServer::Impl::close_all() {
  beast::error_code ignored;
  acceptor_.close(ignored);
  if (accept_loop_) accept_loop_->stop();
  gate_.flush();
  // Copy first: closing completes handlers that may destroy sessions.
  std::vector<std::shared_ptr<Session>> live;
  for (auto& [raw, weak] : sessions_) {
    if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->close();
}

HorovodHttpServer::HorovodHttpServer(const hostfile::Placement& placement,
                                     const std::string& bind_address, std::uint16_t port,
                                     HttpServerLimits limits)
    : impl_(std::make_unique<Impl>(placement, bind_address, port, limits)) {}

HorovodHttpServer::~HorovodHttpServer() = default;

std::uint16_t HorovodHttpServer::port() const { return impl_->port(); }
void HorovodHttpServer::allow_only(const std::vector<std::string>& addresses) {
  impl_->allow_only(addresses);
}
void HorovodHttpServer::allow_also(const std::vector<std::string>& addresses) {
  impl_->allow_also(addresses);
}
void HorovodHttpServer::serve_user(unsigned uid) { impl_->serve_user(static_cast<uid_t>(uid)); }
void HorovodHttpServer::judge_peers_with(std::function<std::optional<unsigned>(int)> lookup) {
  impl_->judge_peers_with([lookup = std::move(lookup)](int fd) -> std::optional<uid_t> {
    auto uid = lookup(fd);
    if (!uid) return std::nullopt;
    return static_cast<uid_t>(*uid);
  });
}
void HorovodHttpServer::start() { impl_->start(); }
void HorovodHttpServer::stop() { impl_->stop(); }
HttpServerStats HorovodHttpServer::stats() const { return impl_->stats(); }
const ThreadFailure& HorovodHttpServer::failure() const { return impl_->failure(); }

}  // namespace hvdrun::compat
