// The host leaders' mesh (runtime/frames/frame_mesh.h): its listening socket, the dial and the
// accept of each pair (the proofs of the job secret both ways, one GMAC key per direction),
// and the connection of the pairs a collective needs, on demand. A dial that is refused or
// closed before the proofs is tried again, with backoff, until the mesh's deadline.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/backoff.h"
#include "common/deadline.h"
#include "common/log.h"
#include "common/peer_loss.h"
#include "common/plural.h"
#include "common/seconds_text.h"
#include "runtime/core/generation_end.h"
#include "runtime/frames/frame_mesh.h"

namespace hvdrun::runtime {
namespace {

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw_errno("frames: making a socket non-blocking", "fcntl");
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A dial attempt that failed where another may not: the connection was refused, reset,
// timed out, or closed before the acceptor's proof.
struct DialRetry {
  std::string what;
};

// dial()'s attempts: the first few tens of milliseconds apart, then up to a second; the 40
// span about 34 s, so the mesh's connect deadline usually ends them first.
constexpr BackoffPolicy kDialBackoff{40, std::chrono::milliseconds(20),
                                     std::chrono::milliseconds(1000)};

// A socket connected to `ai` before `deadline`; DialRetry when it is not.
UniqueFd connect_to(const addrinfo& ai, std::chrono::steady_clock::time_point deadline) {
  UniqueFd fd(::socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("frames: a socket to dial a peer", "socket");
  set_nonblocking(fd.get());
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) < 0 && errno != EINPROGRESS)
    throw DialRetry{std::string("connect: ") + std::strerror(errno)};
  pollfd pfd{fd.get(), POLLOUT, 0};
  int rc = 0;
  while ((rc = ::poll(&pfd, 1, static_cast<int>(ms_left(deadline)))) < 0 && errno == EINTR) {
  }
  if (rc <= 0) throw DialRetry{"connect timed out"};
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) throw DialRetry{std::string("connect: ") + std::strerror(err)};
  return fd;
}

// Waits `pause` between two attempts; the generation's end (runtime/core/generation_end.h)
// ends the wait at once, and the dial with it.
void pause_for(std::chrono::milliseconds pause) {
  pollfd pfd{generation_end().fd(), POLLIN, 0};
  ::poll(&pfd, 1, static_cast<int>(pause.count()));
  generation_end().check();
}

}  // namespace

// Writes or reads exactly `n` bytes on a blocking-with-poll socket before `deadline`.
void FrameComm::Impl::io_exact(int fd, unsigned char* p, std::size_t n, bool out,
                               Clock::time_point deadline, const std::string& what) {
  while (n > 0) {
    const ssize_t r = out ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) throw Error(what + ": the other end closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      throw Error(what + ": " + (out ? "send" : "recv") + ": " + std::strerror(errno));
    // The generation's end (runtime/core/generation_end.h) ends the wait at once.
    std::array<pollfd, 2> pfd{
        {{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0}, {generation_end().fd(), POLLIN, 0}}};
    const int left = millis_left(deadline);
    if (left == 0 || ::poll(pfd.data(), pfd.size(), left) == 0) throw Error(what + ": timed out");
    generation_end().check();
  }
}

void FrameComm::Impl::listen_on(const std::string& local_ip) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(local_ip.c_str(), "0", &hints, &res); rc != 0)
    throw Error("frames: rank " + std::to_string(rank_) + ": cannot resolve its address '" +
                local_ip + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  listener_.reset(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener_) throw_errno("frames: listening socket", "socket");
  if (::bind(listener_.get(), res->ai_addr, res->ai_addrlen) < 0)
    throw_errno("frames: binding " + local_ip, "bind");
  if (::listen(listener_.get(), 128) < 0) throw_errno("frames: listen on " + local_ip, "listen");
  set_nonblocking(listener_.get());
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  char host[NI_MAXHOST], port[NI_MAXSERV];
  ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), port, sizeof(port),
                NI_NUMERICHOST | NI_NUMERICSERV);
  // The nonce travels in the store, which only the job's processes can read or write.
  store_.set(addr_key(rank_), std::string(host) + " " + port + " " + rendezvous::to_hex(nonce_));
}

std::string FrameComm::Impl::proof(const char* role, int dialer, int acceptor,
                                   std::string_view acceptor_nonce,
                                   std::string_view dialer_nonce) const {
  const auto t = hmac_.tag({role, prefix_, std::to_string(dialer), std::to_string(acceptor),
                            acceptor_nonce, dialer_nonce});
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}

std::unique_ptr<rendezvous::GmacKey> FrameComm::Impl::frame_key(
    int from, int to, std::string_view acceptor_nonce, std::string_view dialer_nonce) const {
  const auto t = hmac_.tag({"hvdrun-frames key", prefix_, std::to_string(from), std::to_string(to),
                            acceptor_nonce, dialer_nonce});
  return std::make_unique<rendezvous::GmacKey>(t.data());
}

std::vector<std::string> FrameComm::Impl::wait_for(const std::vector<std::string>& keys) {
  return rendezvous::wait_for_unless_failed(store_, keys, connect_timeout_, failure_key_,
                                            [this](const std::string& why) { failed_first(why); });
}

void FrameComm::Impl::check_failure_key() {
  if (failure_key_.empty()) return;
  if (auto why = store_.get(failure_key_)) failed_first(*why);
}

[[noreturn]] void FrameComm::Impl::failed_first(const std::string& why) const {
  throw Error("frames: rank " + std::to_string(rank_) +
              " stopped waiting for its peers: a rank failed first: " + why + ". " +
              std::string(kPeerLossSentence));
}

void FrameComm::Impl::ensure_peers(const std::vector<int>& needed) {
  if (!broken_.empty())
    throw Error("frames: rank " + std::to_string(rank_) +
                ": an earlier collective across hosts failed, so its connections are out of "
                "step: " +
                broken_);
  if (size_ < 2) return;
  std::vector<int> lower, higher;
  for (int p : needed)
    if (p != rank_ && !peers_[static_cast<std::size_t>(p)].fd)
      (p < rank_ ? lower : higher).push_back(p);
  if (lower.empty() && higher.empty()) return;
  std::sort(lower.begin(), lower.end());
  lower.erase(std::unique(lower.begin(), lower.end()), lower.end());
  std::sort(higher.begin(), higher.end());
  higher.erase(std::unique(higher.begin(), higher.end()), higher.end());
  try {
    connect_pairs(lower, higher);
  } catch (const std::exception& e) {
    broken_ = e.what();
    throw;
  }
}

std::vector<int> FrameComm::Impl::all_peers() const {
  std::vector<int> v;
  for (int p = 0; p < size_; ++p)
    if (p != rank_) v.push_back(p);
  return v;
}

void FrameComm::Impl::connect_pairs(const std::vector<int>& lower, const std::vector<int>& higher) {
  std::vector<std::string> keys;
  for (int p : lower) keys.push_back(addr_key(p));
  auto missing = keys.empty() ? keys : wait_for(keys);
  if (!missing.empty())
    throw Error("frames: rank " + std::to_string(rank_) + ": " + std::to_string(missing.size()) +
                " peer(s) did not publish their addresses within " +
                std::to_string(connect_timeout_.count() / 1000) +
                " s (they may have crashed, or be stuck before this collective), first " +
                missing.front());
  const auto deadline = Clock::now() + connect_timeout_;
  for (int p : lower) {
    const auto value = store_.get(addr_key(p));
    if (!value)
      throw Error("frames: rank " + std::to_string(rank_) + ": the address of rank " +
                  std::to_string(p) + " vanished from the rendezvous store");
    dial(p, *value, deadline);
  }
  accept_from(higher, deadline);
  // Every higher rank is connected: nothing more can dial this rank.
  bool all = true;
  for (int p = rank_ + 1; p < size_; ++p) all = all && peers_[static_cast<std::size_t>(p)].fd;
  if (all) listener_.reset();
}

void FrameComm::Impl::dial(int p, const std::string& value, Clock::time_point deadline) {
  const std::string who =
      "frames: rank " + std::to_string(rank_) + " connecting to rank " + std::to_string(p);
  const auto sp1 = value.find(' '), sp2 = value.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) throw Error(who + ": malformed address in store");
  const std::string host = value.substr(0, sp1), port = value.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string their_nonce;
  for (std::size_t i = sp2 + 1; i + 1 < value.size(); i += 2)
    their_nonce += static_cast<char>(std::stoi(value.substr(i, 2), nullptr, 16));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || !res)
    throw Error(who + ": bad address " + host + ":" + port);
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  const std::string at = who + " at " + host + ":" + port;
  // Refused (the acceptor is not listening yet), reset, or closed before the acceptor's
  // proof (its pending cap made room for newer connections, or a stranger's flood did):
  // tried again under the mesh's deadline. A wrong proof is not retried (dial_handshake).
  Backoff backoff(kDialBackoff, deadline);
  std::string last;
  for (;;) {
    try {
      dial_handshake(p, connect_to(*res, deadline), their_nonce, at, deadline);
      return;
    } catch (const DialRetry& e) {
      last = e.what;
    }
    const auto pause = backoff.next();
    if (!pause) break;
    hvdrun::log().debug("{}: {}; retrying ({}/{}) after {} ms", at, last, backoff.failed(),
                        backoff.retries(), pause->count());
    pause_for(*pause);
    check_failure_key();  // a rank that failed first is not worth the rest of the deadline
  }
  throw Error(at + ": gave up after " + counted(backoff.failed(), "attempt") + " within the " +
              seconds_text(connect_timeout_) + " s connect deadline: " + last);
}

void FrameComm::Impl::dial_handshake(int p, UniqueFd fd, std::string_view their_nonce,
                                     const std::string& at, Clock::time_point deadline) {
  const std::string my_nonce = rendezvous::random_bytes(kNonceBytes);
  std::array<unsigned char, kHelloBytes> hello{};
  std::memcpy(hello.data(), kHelloMagic.data(), kHelloMagic.size());
  put32(hello.data() + 8, static_cast<std::uint32_t>(rank_));
  put32(hello.data() + 12, static_cast<std::uint32_t>(p));
  std::memcpy(hello.data() + 16, my_nonce.data(), kNonceBytes);
  const std::string mine = proof("hvdrun-frames dial", rank_, p, their_nonce, my_nonce);
  std::memcpy(hello.data() + 16 + kNonceBytes, mine.data(), kMacBytes);
  std::array<unsigned char, kMacBytes> answer{};
  try {
    io_exact(fd.get(), hello.data(), hello.size(), true, deadline, "sending its hello");
    io_exact(fd.get(), answer.data(), answer.size(), false, deadline,
             "waiting for its proof of the job secret");
  } catch (const Error& e) {
    generation_end().check();  // the generation's end is final: not a reason to retry
    throw DialRetry{e.what()};
  }
  const std::string want = proof("hvdrun-frames accept", rank_, p, their_nonce, my_nonce);
  if (!rendezvous::tags_equal(answer.data(), reinterpret_cast<const unsigned char*>(want.data())))
    throw Error(at + ": the other end did not prove the job secret: something other than rank " +
                std::to_string(p) + " of this job answered (docs/security.md)");
  auto& peer = peers_[static_cast<std::size_t>(p)];
  set_nodelay(fd.get());
  peer.fd = std::move(fd);
  peer.send_key = frame_key(rank_, p, their_nonce, my_nonce);
  peer.recv_key = frame_key(p, rank_, their_nonce, my_nonce);
}

void FrameComm::Impl::accept_from(const std::vector<int>& expected, Clock::time_point deadline) {
  const auto waiting = [&] {
    std::vector<int> late;
    for (int p : expected)
      if (!peers_[static_cast<std::size_t>(p)].fd) late.push_back(p);
    return late;
  };
  if (waiting().empty()) return;
  PreauthGate gate("host leaders' frame port of rank " + std::to_string(rank_),
                   "that have not proved the job secret", PreauthPolicy{});
  std::map<PendingCap::Id, Pending> pending;
  auto last_failure_check = Clock::now();
  while (!waiting().empty()) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (*it->second.evicted || Clock::now() >= it->second.deadline) {
        if (!*it->second.evicted)
          gate.refuse("timeout", "frames: a connection from " + it->second.source + " to rank " +
                                     std::to_string(rank_) + " sent no hello in time; closed");
        gate.leave(it->first);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (Clock::now() >= deadline) {
      std::string list;
      for (int p : waiting()) list += (list.empty() ? "" : ", ") + std::to_string(p);
      throw Error("frames: rank " + std::to_string(rank_) + ": rank(s) " + list +
                  " did not connect and prove the job secret within " +
                  std::to_string(connect_timeout_.count() / 1000) + " s");
    }
    if (!failure_key_.empty() &&
        Clock::now() - last_failure_check > std::chrono::milliseconds(200)) {
      last_failure_check = Clock::now();
      check_failure_key();
    }
    generation_end().check();  // checked every 200 ms at most
    std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
    std::vector<PendingCap::Id> ids;
    for (auto& [id, p] : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      ids.push_back(id);
    }
    ::poll(fds.data(), fds.size(), std::min(200, std::max(1, millis_left(deadline))));
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        read_hello(gate, pending, ids[i - 1], deadline);
    if (fds[0].revents & POLLIN) admit(gate, pending);
  }
  gate.flush();
}

bool FrameComm::Impl::read_hello(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending,
                                 PendingCap::Id id, Clock::time_point deadline) {
  auto it = pending.find(id);
  if (it == pending.end() || *it->second.evicted) return false;
  Pending& p = it->second;
  const ssize_t r = ::recv(p.fd.get(), p.hello.data() + p.got, kHelloBytes - p.got, 0);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (r <= 0) {
    gate.refuse("closed", "frames: a connection from " + p.source + " to rank " +
                              std::to_string(rank_) + " closed before its hello");
    gate.leave(id);
    pending.erase(it);
    return false;
  }
  p.got += static_cast<std::size_t>(r);
  if (p.got < kHelloBytes) return false;
  const int from = static_cast<int>(get32(p.hello.data() + 8));
  const std::string why = check_hello(p.hello);
  if (!why.empty()) {
    gate.refuse("bad hello", "frames: a connection from " + p.source + " to rank " +
                                 std::to_string(rank_) + " " + why + "; closed");
    gate.leave(id);
    pending.erase(it);
    return false;
  }
  const std::string their_nonce(reinterpret_cast<const char*>(p.hello.data() + 16), kNonceBytes);
  std::string answer = proof("hvdrun-frames accept", from, rank_, nonce_, their_nonce);
  io_exact(p.fd.get(), reinterpret_cast<unsigned char*>(answer.data()), answer.size(), true,
           deadline,
           "frames: rank " + std::to_string(rank_) + " answering rank " + std::to_string(from));
  auto& peer = peers_[static_cast<std::size_t>(from)];
  set_nodelay(p.fd.get());
  peer.fd = std::move(p.fd);
  peer.send_key = frame_key(rank_, from, nonce_, their_nonce);
  peer.recv_key = frame_key(from, rank_, nonce_, their_nonce);
  gate.leave(id);
  pending.erase(it);
  return true;
}

void FrameComm::Impl::admit(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending) {
  for (;;) {
    UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) return;
    Pending p;
    p.source = connection_source(fd.get());
    p.fd = std::move(fd);
    p.deadline = gate.deadline(Clock::now());
    const PendingCap::Id id = gate.enter(p.source, [flag = p.evicted]() { *flag = true; });
    pending.emplace(id, std::move(p));
  }
}

std::string FrameComm::Impl::check_hello(const std::array<unsigned char, kHelloBytes>& h) {
  if (std::memcmp(h.data(), kHelloMagic.data(), kHelloMagic.size()) != 0)
    return "sent something other than a hello";
  const auto from = get32(h.data() + 8), to = get32(h.data() + 12);
  if (to != static_cast<std::uint32_t>(rank_) || from <= static_cast<std::uint32_t>(rank_) ||
      from >= static_cast<std::uint32_t>(size_))
    return "named ranks " + std::to_string(from) + " -> " + std::to_string(to) +
           ", which do not dial this rank";
  const std::string their_nonce(reinterpret_cast<const char*>(h.data() + 16), kNonceBytes);
  const std::string want =
      proof("hvdrun-frames dial", static_cast<int>(from), rank_, nonce_, their_nonce);
  if (!rendezvous::tags_equal(h.data() + 16 + kNonceBytes,
                              reinterpret_cast<const unsigned char*>(want.data())))
    return "did not prove the job secret (as rank " + std::to_string(from) + ")";
  if (peers_[from].fd) return "claimed rank " + std::to_string(from) + ", already connected";
  return "";
}

}  // namespace hvdrun::runtime
