// Horovod's HTTP rendezvous on Boost.Beast: one I/O thread and one session object per
// connection; what a request means is horovod_http_handler.cc's business.
#include "compat/horovod_http_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/error.h"
#include "compat/horovod_http_handler.h"

namespace hvdrun::compat {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

}  // namespace

class HorovodHttpServer::Impl {
 public:
  class Session;

  Impl(const hostfile::Placement& placement, const std::string& bind_address, std::uint16_t port,
       HttpServerLimits limits)
      : limits_(limits), store_(placement, limits.max_store_bytes) {
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
    std::vector<asio::ip::address> parsed;
    for (const auto& a : addresses) {
      boost::system::error_code ec;
      auto addr = asio::ip::make_address(a, ec);
      if (ec) {
        throw UsageError("Horovod rendezvous: allowed client '" + a +
                         "' is not an IPv4 or IPv6 address");
      }
      parsed.push_back(normalize(addr));
    }
    allowed_ = std::move(parsed);
  }

  bool admitted(const tcp::socket& socket) const {
    if (allowed_.empty()) return true;
    boost::system::error_code ec;
    auto peer = socket.remote_endpoint(ec);
    if (ec) return false;
    const auto addr = normalize(peer.address());
    for (const auto& a : allowed_) {
      if (a == addr) return true;
    }
    return false;
  }

  void start() {
    if (started_.exchange(true)) throw std::logic_error("HorovodHttpServer::start called twice");
    accept();
    thread_ = std::thread([this] {
      try {
        io_.run();
      } catch (...) {
        // The launcher's loop polls failure_.fd() and ends the job with this cause.
        failure_.set(std::current_exception());
        spdlog::debug("Horovod rendezvous: I/O thread stopped: {}", describe(failure_.get()));
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
    s.dropped_connections = dropped_.load();
    s.open_connections = open_.load();
    const auto store = store_.stats();
    s.scopes = store.scopes;
    s.stored_bytes = store.stored_bytes;
    s.scopes_cleared = store.scopes_cleared;
    return s;
  }

  const HttpServerLimits& limits() const { return limits_; }
  HorovodStore& store() { return store_; }

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
  void accept();
  void close_all();

  /// ::ffff:a.b.c.d compares as a.b.c.d.
  static asio::ip::address normalize(const asio::ip::address& a) {
    if (a.is_v6() && a.to_v6().is_v4_mapped()) {
      return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
    }
    return a;
  }

  HttpServerLimits limits_;
  std::vector<asio::ip::address> allowed_;
  HorovodStore store_;
  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::size_t> open_{0};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  // Sessions alive now; touched only on the I/O thread (or after it has been joined).
  // Declared before io_ so that it outlives the handlers io_ destroys.
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  std::uint16_t port_ = 0;
  ThreadFailure failure_;
  std::thread thread_;
};

/// One client connection: read a request, answer it, repeat while keep-alive holds.
class HorovodHttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, tcp::socket socket) : server_(server), stream_(std::move(socket)) {}
  ~Session() { server_.forget(this); }

  void run() { read_header(); }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

 private:
  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.limits().max_header_bytes));
    parser_->body_limit(server_.limits().max_body_bytes);
    stream_.expires_after(server_.limits().idle_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_error(ec);
    auto& req = parser_->get();
    // A client that announces a body and waits for the go-ahead (curl does) gets it,
    // unless the body could never be accepted anyway.
    if (req[http::field::expect] == "100-continue" && !parser_->is_done()) {
      auto length = parser_->content_length();
      if (length && *length > server_.limits().max_body_bytes) {
        return respond(http::status::payload_too_large, "request body too large\n", false);
      }
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

  void read_body() {
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
      spdlog::debug("Horovod rendezvous: unparseable request from {}: {}", peer(), ec.message());
      return respond(http::status::bad_request, "malformed HTTP request\n", false);
    }
    spdlog::debug("Horovod rendezvous: dropping connection from {}: {}", peer(), ec.message());
    server_.count_drop();
  }

  void handle() {
    auto& req = parser_->get();
    const bool keep_alive = req.keep_alive();
    const auto verb = req.method_string();
    const auto method = parse_http_method(std::string_view(verb.data(), verb.size()));
    auto reply = handle_horovod_request(server_.store(), method,
                                        std::string_view(req.target().data(), req.target().size()),
                                        std::move(req.body()));
    respond(static_cast<http::status>(reply.status), std::move(reply.body), keep_alive);
  }

  void respond(http::status status, std::string body, bool keep_alive) {
    server_.count_request(status);
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
    http::async_write(stream_, *response_,
                      [self = shared_from_this(), keep_alive](beast::error_code ec, std::size_t) {
                        if (ec) return self->on_error(ec);
                        if (keep_alive) return self->read_header();
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
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
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::response<http::empty_body>> continue_;
  std::shared_ptr<http::response<http::string_body>> response_;
};

void HorovodHttpServer::Impl::accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      // Out of descriptors and the like: keep serving the connections we have.
      spdlog::warn("Horovod rendezvous: accept failed: {}", ec.message());
      return accept();
    }
    if (sessions_.size() >= limits_.max_connections || !admitted(socket)) {
      ++dropped_;
      beast::error_code ignored;
      socket.close(ignored);
      return accept();
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto session = std::make_shared<Session>(*this, std::move(socket));
    sessions_.emplace(session.get(), session);
    open_ = sessions_.size();
    session->run();
    accept();
  });
}

void HorovodHttpServer::Impl::close_all() {
  beast::error_code ignored;
  acceptor_.close(ignored);
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
void HorovodHttpServer::start() { impl_->start(); }
void HorovodHttpServer::stop() { impl_->stop(); }
HttpServerStats HorovodHttpServer::stats() const { return impl_->stats(); }
const ThreadFailure& HorovodHttpServer::failure() const { return impl_->failure(); }

}  // namespace hvdrun::compat
