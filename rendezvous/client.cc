// Blocking rendezvous client over a POSIX socket: every read and write is bounded by
// the deadline of the call it belongs to (poll), so no call can hang.
#include "rendezvous/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/backoff.h"
#include "common/deadline.h"
#include "common/fd.h"
#include "common/log.h"
#include "rendezvous/protocol.h"

namespace hvdrun::rendezvous {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int remaining_ms(Clock::time_point deadline) { return poll_ms_left(deadline); }

// An I/O failure that may go away on retry during connect (refused, reset, timeout).
struct TransientError {
  std::string what;
};

std::string sockaddr_ip(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr, buf, sizeof buf);
  return buf;
}

// Waits until `fd` is ready for `events` or the deadline passes. Returns false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(ClientOptions o) : opts_(std::move(o)), secret_(opts_.secret) {
    address_ = (opts_.host.find(':') != std::string::npos ? "[" + opts_.host + "]" : opts_.host) +
               ":" + std::to_string(opts_.port);
    connect_with_retries();
  }

  const ClientOptions opts_;
  Hmac secret_;
  std::string address_;
  std::string local_ip_;
  UniqueFd fd_;
  std::optional<FrameCodec> codec_;
  bool broken_ = false;
  std::string rbuf_;
  std::size_t rpos_ = 0;

  std::string prefix() const {
    return "rendezvous" + (opts_.who.empty() ? std::string() : " (" + opts_.who + ")");
  }

  void connect_with_retries() {
    auto deadline = Clock::now() + opts_.connect_timeout;
    Backoff backoff({opts_.max_attempts, opts_.backoff_initial, opts_.backoff_max}, deadline);
    std::string last;
    for (;;) {
      try {
        connect_once(deadline);
        return;
      } catch (const TransientError& e) {
        last = e.what;
      }
      const auto wait = backoff.next();
      if (!wait) break;
      hvdrun::log().warn("{}: connect to {} failed: {}; retrying ({}/{}) after {} ms", prefix(),
                         address_, last, backoff.failed(), backoff.retries(), wait->count());
      std::this_thread::sleep_for(*wait);
      if (Clock::now() >= deadline) break;
    }
    throw Error(prefix() + ": cannot reach the rendezvous server at " + address_ + " within " +
                std::to_string(opts_.connect_timeout.count() / 1000.0).substr(0, 4) +
                " s: " + last +
                ". Is the job still running, and is this address reachable from this host "
                "(try --network-interface)?");
  }

  void connect_once(Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(opts_.host.c_str(), std::to_string(opts_.port).c_str(), &hints, &res);
    if (rc != 0) throw TransientError{std::string("resolve: ") + ::gai_strerror(rc)};
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
    std::string last = "no address";
    for (auto* ai = res; ai; ai = ai->ai_next) {
      UniqueFd fd(
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
      if (!fd) {
        last = std::string("socket: ") + std::strerror(errno);
        continue;
      }
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        last = std::string("connect: ") + std::strerror(errno);
        continue;
      }
      // A single attempt gets at most 5 s so a black-holed address leaves time to retry.
      auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
      if (!wait_fd(fd.get(), POLLOUT, attempt_deadline)) {
        last = "connect: timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = std::string("connect: ") + std::strerror(err);
        continue;
      }
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      sockaddr_storage ss{};
      socklen_t sl = sizeof ss;
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &sl);
      fd_ = std::move(fd);
      rbuf_.clear();
      rpos_ = 0;
      local_ip_ = sockaddr_ip(ss);
      try {
        handshake(attempt_deadline);
      } catch (const TransientError&) {
        fd_.reset();
        throw;
      }
      return;
    }
    throw TransientError{last};
  }

  void handshake(Clock::time_point deadline) {
    auto greeting = read_frame(deadline, 64, "handshake");
    if (greeting.size() != kGreeting.size() + kMacBytes ||
        greeting.compare(0, kGreeting.size(), kGreeting) != 0)
      throw Error(prefix() + ": " + address_ +
                  " is not an hvdrun rendezvous server (or speaks another protocol version)");
    auto server_nonce = greeting.substr(kGreeting.size());
    auto client_nonce = random_bytes(kMacBytes);
    write_all_deadline(
        plain_frame(client_nonce + Handshake::client_proof(secret_, server_nonce, client_nonce)),
        deadline, "handshake");
    auto answer = read_frame(deadline, 256, "handshake");
    if (answer.empty()) throw TransientError{"handshake: empty answer"};
    if (answer[0] != '\0')
      throw Error(prefix() + ": the rendezvous server at " + address_ +
                  " rejected this client's proof of the job secret. HVDRUN_SECRET must be the "
                  "value hvdrun set for this job (do not copy it between jobs)");
    auto proof = answer.substr(1);
    auto expected = Handshake::server_proof(secret_, server_nonce, client_nonce);
    if (proof.size() != kMacBytes ||
        !tags_equal(reinterpret_cast<const unsigned char*>(proof.data()),
                    reinterpret_cast<const unsigned char*>(expected.data())))
      throw Error(prefix() + ": the server at " + address_ +
                  " could not prove it holds the job secret; refusing to talk to it");
    codec_.emplace(Handshake::session_key(secret_, server_nonce, client_nonce), false);
  }

  // Reads one length-prefixed frame body; TransientError on timeout or disconnect.
  std::string read_frame(Clock::time_point deadline, std::uint32_t cap, const char* what) {
    char hdr[4];
    read_exact(hdr, 4, deadline, what);
    auto len = get_u32(hdr);
    if (len > cap)
      throw Error(prefix() + ": " + what + ": server at " + address_ + " sent a frame of " +
                  std::to_string(len) + " bytes (limit " + std::to_string(cap) + ")");
    std::string body(len, '\0');
    read_exact(body.data(), len, deadline, what);
    return body;
  }

  // Buffered: one poll and one recv usually bring a whole response.
  void read_exact(char* p, std::size_t n, Clock::time_point deadline, const char* what) {
    while (rbuf_.size() - rpos_ < n) fill(deadline, what);
    std::memcpy(p, rbuf_.data() + rpos_, n);
    rpos_ += n;
    if (rpos_ == rbuf_.size()) {
      rbuf_.clear();
      rpos_ = 0;
    }
  }

  void fill(Clock::time_point deadline, const char* what) {
    char tmp[64 * 1024];
    for (;;) {
      if (!wait_fd(fd_.get(), POLLIN, deadline))
        throw TransientError{std::string(what) + ": no answer before the deadline"};
      ssize_t r = ::recv(fd_.get(), tmp, sizeof tmp, 0);
      if (r > 0) {
        rbuf_.append(tmp, static_cast<std::size_t>(r));
        return;
      }
      if (r == 0) throw TransientError{std::string(what) + ": server closed the connection"};
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw TransientError{std::string(what) + ": recv: " + std::strerror(errno)};
    }
  }

  void write_all_deadline(const std::string& data, Clock::time_point deadline, const char* what) {
    const char* p = data.data();
    std::size_t n = data.size();
    while (n > 0) {
      ssize_t r = ::send(fd_.get(), p, n, MSG_NOSIGNAL);
      if (r > 0) {
        p += r;
        n -= static_cast<std::size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_fd(fd_.get(), POLLOUT, deadline))
          throw TransientError{std::string(what) + ": send timed out"};
        continue;
      }
      throw TransientError{std::string(what) + ": send: " + std::strerror(errno)};
    }
  }

  static std::string describe(const Request& req) {
    std::string s = op_name(req.op);
    if (!req.keys.empty()) {
      s += " '" + req.keys[0] + "'";
      if (req.keys.size() > 1) s += " (+" + std::to_string(req.keys.size() - 1) + " keys)";
    }
    return s;
  }

  Response call(const Request& req, Clock::time_point deadline) {
    if (broken_)
      throw Error(prefix() + ": " + describe(req) + ": connection to " + address_ +
                  " was lost earlier");
    try {
      write_all_deadline(codec_->seal(encode(req)), deadline, op_name(req.op));
      auto body = read_frame(deadline, kMaxFrameBytes, op_name(req.op));
      auto resp = decode_response(codec_->open(body));
      if (resp.status == Status::kBadRequest)
        throw Error(prefix() + ": " + describe(req) + " rejected by " + address_ + ": " +
                    resp.message);
      if (resp.status == Status::kStopping) {
        broken_ = true;
        throw Error(prefix() + ": " + describe(req) + " at " + address_ + ": " + resp.message);
      }
      return resp;
    } catch (const TransientError& e) {
      broken_ = true;
      throw Error(prefix() + ": " + describe(req) + " at " + address_ + ": " + e.what +
                  " (the launcher may have exited)");
    } catch (const ProtocolError& e) {
      broken_ = true;
      throw Error(prefix() + ": " + describe(req) + " at " + address_ + ": " + e.what());
    }
  }

  Response call(const Request& req) { return call(req, Clock::now() + opts_.call_timeout); }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Client::~Client() = default;

void Client::set(const std::string& key, const std::string& value) {
  Request r;
  r.op = Op::kSet;
  r.keys = {key};
  r.values = {value};
  impl_->call(r);
}

void Client::multi_set(const std::vector<std::pair<std::string, std::string>>& items) {
  if (items.empty()) return;
  Request r;
  r.op = Op::kMultiSet;
  for (const auto& [k, v] : items) {
    r.keys.push_back(k);
    r.values.push_back(v);
  }
  impl_->call(r);
}

std::optional<std::string> Client::get(const std::string& key) {
  Request r;
  r.op = Op::kGet;
  r.keys = {key};
  auto resp = impl_->call(r);
  if (resp.status == Status::kNotFound || resp.values.empty()) return std::nullopt;
  return resp.values[0];
}

std::vector<std::optional<std::string>> Client::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  Request r;
  r.op = Op::kMultiGet;
  r.keys = keys;
  auto resp = impl_->call(r);
  if (resp.values.size() != keys.size())
    throw Error(impl_->prefix() + ": multi_get: server at " + impl_->address_ +
                " answered with the wrong number of values");
  return std::move(resp.values);
}

std::int64_t Client::add(const std::string& key, std::int64_t delta) {
  Request r;
  r.op = Op::kAdd;
  r.keys = {key};
  r.delta = delta;
  return impl_->call(r).number;
}

bool Client::erase(const std::string& key) {
  Request r;
  r.op = Op::kDelete;
  r.keys = {key};
  return impl_->call(r).number != 0;
}

std::vector<std::string> Client::wait_for(const std::vector<std::string>& keys,
                                          std::chrono::milliseconds timeout) {
  if (keys.empty()) return {};
  Request r;
  r.op = Op::kWait;
  r.keys = keys;
  r.timeout_ms = static_cast<std::uint32_t>(std::clamp<long long>(timeout.count(), 1, 1LL << 31));
  // The server keeps the deadline; the client allows it a margin to deliver the answer.
  auto resp = impl_->call(r, Clock::now() + timeout + std::chrono::seconds(5));
  std::vector<std::string> missing;
  if (resp.status == Status::kTimeout)
    for (auto i : resp.missing)
      if (i < keys.size()) missing.push_back(keys[i]);
  return missing;
}

void Client::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                  const std::string& what) {
  auto missing = wait_for(keys, timeout);
  if (missing.empty()) return;
  const std::string list = key_list(missing);  // before `missing` is moved from
  throw TimeoutError(impl_->prefix() + ": " + (what.empty() ? "wait" : what) + ": " + list +
                         " did not appear within " + std::to_string(timeout.count()) +
                         " ms (server " + impl_->address_ + ")",
                     std::move(missing));
}

void Client::ping() {
  Request r;
  r.op = Op::kPing;
  impl_->call(r);
}

const std::string& Client::local_address() const { return impl_->local_ip_; }
const std::string& Client::server_address() const { return impl_->address_; }

}  // namespace hvdrun::rendezvous
