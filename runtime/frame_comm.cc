// The authenticated mesh of runtime/frame_comm.h: connection and handshake, the framed and
// MAC'd transfer engine (one poll loop that moves every transfer of a step at once, so two
// ranks that both send never wait on each other), and the collectives on top of it.
#include "runtime/frame_comm.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <thread>

#include "common/fd.h"
#include "common/log.h"
#include "common/peer_loss.h"
#include "common/preauth_gate.h"
#include "rendezvous/gmac.h"
#include "rendezvous/protocol.h"
#include "runtime/generation_end.h"
#include "runtime/gloo_comm.h"  // kSmallAllreduceBytes
#include "runtime/shm_reduce.h"

namespace hvdrun::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::kMacBytes;

constexpr std::array<char, 8> kHelloMagic = {'h', 'v', 'd', 'f', 'r', 'm', '1', '\n'};
constexpr std::size_t kNonceBytes = 16;
// A dialling rank's hello: magic, its rank, the rank it dials, its nonce, its proof.
constexpr std::size_t kHelloBytes = kHelloMagic.size() + 4 + 4 + kNonceBytes + kMacBytes;
constexpr std::uint32_t kFrameMagic = 0x52465648;  // "HVFR" on the wire
constexpr std::size_t kFrameHeaderBytes = 16;      // magic, reserved, payload length
constexpr std::size_t kTagBytes = rendezvous::kGmacTagBytes;
// Steps that send at least this much send on a thread of their own (see run()).
constexpr std::size_t kThreadedBytes = 1 << 20;

void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::size_t frames_of(std::size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kFrameBytes - 1) / kFrameBytes;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw_errno("frames: making a socket non-blocking", "fcntl");
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int millis_left(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1000000));
}

// Writes or reads exactly `n` bytes on a blocking-with-poll socket before `deadline`.
void io_exact(int fd, unsigned char* p, std::size_t n, bool out, Clock::time_point deadline,
              const std::string& what) {
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
    // The generation's end (runtime/generation_end.h) ends the wait at once.
    std::array<pollfd, 2> pfd{
        {{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0}, {generation_end().fd(), POLLIN, 0}}};
    const int left = millis_left(deadline);
    if (left == 0 || ::poll(pfd.data(), pfd.size(), left) == 0) throw Error(what + ": timed out");
    generation_end().check();
  }
}

}  // namespace

class FrameComm::Impl {
 public:
  Impl(rendezvous::Store& store, std::string prefix, int rank, int size,
       const std::string& local_ip, const std::string& secret, std::chrono::milliseconds op_timeout,
       std::chrono::milliseconds connect_timeout)
      : store_(store),
        prefix_(std::move(prefix)),
        rank_(rank),
        size_(size),
        op_timeout_(op_timeout),
        connect_timeout_(connect_timeout),
        hmac_(secret),
        peers_(static_cast<std::size_t>(size)) {
    if (size_ < 2) return;
    if (secret.empty())
      throw Error("frames: rank " + std::to_string(rank) +
                  ": no job secret to authenticate its connections with (HVDRUN_SECRET)");
    nonce_ = rendezvous::random_bytes(kNonceBytes);
    listen_on(local_ip);
  }

  // --- connection ---

  void listen_on(const std::string& local_ip) {
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

  std::string addr_key(int r) const { return prefix_ + "/addr/" + std::to_string(r); }

  std::string proof(const char* role, int dialer, int acceptor, std::string_view acceptor_nonce,
                    std::string_view dialer_nonce) const {
    const auto t = hmac_.tag({role, prefix_, std::to_string(dialer), std::to_string(acceptor),
                              acceptor_nonce, dialer_nonce});
    return std::string(reinterpret_cast<const char*>(t.data()), t.size());
  }

  // The GMAC key of direction from -> to on the pair (dialer, acceptor).
  std::unique_ptr<rendezvous::GmacKey> frame_key(int from, int to, std::string_view acceptor_nonce,
                                                 std::string_view dialer_nonce) const {
    const auto t = hmac_.tag({"hvdrun-frames key", prefix_, std::to_string(from),
                              std::to_string(to), acceptor_nonce, dialer_nonce});
    return std::make_unique<rendezvous::GmacKey>(t.data());
  }

  std::vector<std::string> wait_for(const std::vector<std::string>& keys) {
    if (failure_key_.empty()) return store_.wait_for(keys, connect_timeout_);
    const auto deadline = Clock::now() + connect_timeout_;
    for (;;) {
      const auto left = std::chrono::milliseconds(millis_left(deadline));
      auto missing = store_.wait_for(
          keys,
          std::max(std::chrono::milliseconds(1), std::min(left, std::chrono::milliseconds(200))));
      if (missing.empty() || left <= std::chrono::milliseconds(200)) return missing;
      if (auto why = store_.get(failure_key_))
        throw Error("frames: rank " + std::to_string(rank_) +
                    " stopped waiting for its peers: a rank failed first: " + *why + ". " +
                    std::string(kPeerLossSentence));
    }
  }

  // Connects the pairs to `needed` that are not connected yet (every rank of the call
  // passes its side of the same pairs: a pair is opened by the collective that first needs
  // it, on both of its ends). The higher rank of a pair dials, the lower one accepts, so two
  // ranks never open two connections to each other; a rank dials its lower peers first
  // (in rank order), then accepts its higher ones, so rank 0 only accepts and every chain
  // of dials ends at a rank that is accepting.
  void ensure_peers(const std::vector<int>& needed) {
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

  std::vector<int> all_peers() const {
    std::vector<int> v;
    for (int p = 0; p < size_; ++p)
      if (p != rank_) v.push_back(p);
    return v;
  }

  void connect_pairs(const std::vector<int>& lower, const std::vector<int>& higher) {
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

  void dial(int p, const std::string& value, Clock::time_point deadline) {
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
    UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno(who, "socket");
    set_nonblocking(fd.get());
    if (::connect(fd.get(), res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS)
      throw Error(who + " at " + host + ":" + port + ": connect: " + std::strerror(errno));
    pollfd pfd{fd.get(), POLLOUT, 0};
    if (::poll(&pfd, 1, millis_left(deadline)) <= 0)
      throw Error(who + " at " + host + ":" + port + ": connect timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      throw Error(who + " at " + host + ":" + port + ": connect: " + std::strerror(err));

    const std::string my_nonce = rendezvous::random_bytes(kNonceBytes);
    std::array<unsigned char, kHelloBytes> hello{};
    std::memcpy(hello.data(), kHelloMagic.data(), kHelloMagic.size());
    put32(hello.data() + 8, static_cast<std::uint32_t>(rank_));
    put32(hello.data() + 12, static_cast<std::uint32_t>(p));
    std::memcpy(hello.data() + 16, my_nonce.data(), kNonceBytes);
    const std::string mine = proof("hvdrun-frames dial", rank_, p, their_nonce, my_nonce);
    std::memcpy(hello.data() + 16 + kNonceBytes, mine.data(), kMacBytes);
    io_exact(fd.get(), hello.data(), hello.size(), true, deadline, who);
    std::array<unsigned char, kMacBytes> answer{};
    io_exact(fd.get(), answer.data(), answer.size(), false, deadline,
             who + " (waiting for its proof of the job secret)");
    const std::string want = proof("hvdrun-frames accept", rank_, p, their_nonce, my_nonce);
    if (!rendezvous::tags_equal(answer.data(), reinterpret_cast<const unsigned char*>(want.data())))
      throw Error(who + " at " + host + ":" + port +
                  ": the other end did not prove the job secret: something other than rank " +
                  std::to_string(p) + " of this job answered (docs/security.md)");
    auto& peer = peers_[static_cast<std::size_t>(p)];
    set_nodelay(fd.get());
    peer.fd = std::move(fd);
    peer.send_key = frame_key(rank_, p, their_nonce, my_nonce);
    peer.recv_key = frame_key(p, rank_, their_nonce, my_nonce);
  }

  struct Pending {
    UniqueFd fd;
    std::array<unsigned char, kHelloBytes> hello{};
    std::size_t got = 0;
    Clock::time_point deadline;
    std::string source;
    std::shared_ptr<bool> evicted = std::make_shared<bool>(false);  // closed by the gate
  };

  // Accepts connections until every rank of `expected` (higher ranks) has dialled and
  // proved the job secret. Another higher rank of this job that dials now (it needs the
  // pair for a later collective) is connected as well; strangers are refused.
  void accept_from(const std::vector<int>& expected, Clock::time_point deadline) {
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
        if (auto why = store_.get(failure_key_))
          throw Error("frames: rank " + std::to_string(rank_) +
                      " stopped waiting for its peers: a rank failed first: " + *why + ". " +
                      std::string(kPeerLossSentence));
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

  // Reads what a pending connection sent; true when it completed a valid hello and is now
  // the connection of its rank.
  bool read_hello(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending, PendingCap::Id id,
                  Clock::time_point deadline) {
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

  // Takes every connection waiting on the listening socket as pending.
  void admit(PreauthGate& gate, std::map<PendingCap::Id, Pending>& pending) {
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

  // Why a complete hello is refused, or "" when it comes from a higher rank of this job.
  std::string check_hello(const std::array<unsigned char, kHelloBytes>& h) {
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

  // --- transfers ---

  struct Peer {
    UniqueFd fd;
    std::unique_ptr<rendezvous::GmacKey> send_key, recv_key;
    std::uint64_t send_seq = 0, recv_seq = 0;
  };

  // One message to or from one peer, cut into frames.
  struct Job {
    int peer;
    bool send;
    unsigned char* data;
    std::size_t bytes;
    std::function<void(std::size_t, std::size_t)> on_frame;  // verified frame (offset, size)
    std::size_t frame = 0;                                   // frames finished
    std::size_t frame_len = 0;                               // payload of the frame in flight
    std::size_t moved = 0;  // bytes of the frame in flight moved so far
    bool started = false;
    std::array<unsigned char, kFrameHeaderBytes> header{};
    std::array<unsigned char, kTagBytes> tag{};
    bool done() const { return frame == frames_of(bytes); }
  };

  static std::array<unsigned char, rendezvous::kGmacIvBytes> iv_of(std::uint64_t seq) {
    std::array<unsigned char, rendezvous::kGmacIvBytes> iv{};
    put64(iv.data(), seq);
    return iv;
  }

  void start_frame(Job& j) {
    Peer& peer = peers_[static_cast<std::size_t>(j.peer)];
    j.frame_len = std::min(kFrameBytes, j.bytes - j.frame * kFrameBytes);
    j.moved = 0;
    j.started = true;
    if (!j.send) return;
    put32(j.header.data(), kFrameMagic);
    put32(j.header.data() + 4, 0);
    put64(j.header.data() + 8, j.frame_len);
    rendezvous::GmacStream mac(*peer.send_key);
    mac.update(j.header.data(), kFrameHeaderBytes);
    mac.update(j.data + j.frame * kFrameBytes, j.frame_len);
    j.tag = mac.finish(iv_of(peer.send_seq++).data());
  }

  [[noreturn]] void frame_error(const Job& j, const std::string& what) {
    throw Error("frames: rank " + std::to_string(rank_) + " rejected frame " +
                std::to_string(j.frame) + " of a message from rank " + std::to_string(j.peer) +
                ": " + what +
                ". The connection between the two host leaders was written into by something "
                "other than the peer (or corrupted); this collective is aborted and no data from "
                "the frame was used (docs/security.md)");
  }

  void finish_recv_frame(Job& j) {
    Peer& peer = peers_[static_cast<std::size_t>(j.peer)];
    unsigned char* payload = j.data + j.frame * kFrameBytes;
    rendezvous::GmacStream mac(*peer.recv_key);
    mac.update(j.header.data(), kFrameHeaderBytes);
    mac.update(payload, j.frame_len);
    const auto want = mac.finish(iv_of(peer.recv_seq).data());
    if (!rendezvous::gmac_tags_equal(want.data(), j.tag.data())) {
      if (get32(j.header.data()) != kFrameMagic || get64(j.header.data() + 8) != j.frame_len)
        frame_error(j, "its header is not the one expected (" + std::to_string(j.frame_len) +
                           " bytes), and its MAC does not check");
      frame_error(j,
                  "its MAC does not check (sequence number " + std::to_string(peer.recv_seq) + ")");
    }
    ++peer.recv_seq;
    if (j.on_frame) j.on_frame(j.frame * kFrameBytes, j.frame_len);
  }

  // Moves what the socket takes or gives now; returns false when it would block.
  bool step(Job& j) {
    if (!j.started) start_frame(j);
    const int fd = peers_[static_cast<std::size_t>(j.peer)].fd.get();
    const std::size_t total = kFrameHeaderBytes + j.frame_len + kTagBytes;
    unsigned char* payload = j.data + j.frame * kFrameBytes;
    std::array<iovec, 3> iov{};
    int n = 0;
    std::size_t at = j.moved;
    const auto add = [&](unsigned char* base, std::size_t len) {
      if (at < len) iov[static_cast<std::size_t>(n++)] = {base + at, len - at};
      at = at > len ? at - len : 0;
    };
    add(j.header.data(), kFrameHeaderBytes);
    add(payload, j.frame_len);
    add(j.tag.data(), kTagBytes);
    ssize_t r;
    if (j.send) {
      msghdr msg{};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = static_cast<std::size_t>(n);
      r = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } else {
      r = ::readv(fd, iov.data(), n);
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
      throw Error("frames: rank " + std::to_string(rank_) +
                  (j.send ? " sending to" : " receiving from") + " rank " + std::to_string(j.peer) +
                  ": " + std::strerror(errno) + ". " + std::string(kPeerLossSentence));
    }
    if (r == 0)
      throw Error("frames: rank " + std::to_string(rank_) + ": rank " + std::to_string(j.peer) +
                  " closed its connection in the middle of a collective. " +
                  std::string(kPeerLossSentence));
    j.moved += static_cast<std::size_t>(r);
    if (j.moved == total) {
      if (!j.send) finish_recv_frame(j);
      ++j.frame;
      j.started = false;
    }
    return true;
  }

  // Runs every job to completion: per peer and direction in order, all peers at once.
  // Large steps send on a second thread while this one receives, checks and reduces, so
  // the two directions' copies and MACs overlap as Gloo's event loop overlaps its reads.
  void run(std::vector<Job>& jobs) {
    const auto deadline = Clock::now() + op_timeout_;
    std::size_t sent = 0;
    bool receives = false;
    for (const auto& j : jobs) {
      if (j.send) sent += j.bytes;
      receives = receives || !j.send;
    }
    try {
      if (sent < kThreadedBytes || !receives) {
        pump(jobs, deadline, true, true, nullptr);
        return;
      }
      std::atomic<bool> stop{false};
      std::exception_ptr send_error;
      std::thread sender([&] {
        try {
          pump(jobs, deadline, true, false, &stop);
        } catch (...) {
          send_error = std::current_exception();
        }
      });
      try {
        pump(jobs, deadline, false, true, nullptr);
      } catch (...) {
        stop = true;  // the sender gives up within one poll slice
        sender.join();
        throw;
      }
      sender.join();
      if (send_error) std::rethrow_exception(send_error);
    } catch (const std::exception& e) {
      broken_ = e.what();
      throw;
    }
  }

  // The jobs of the directions asked for (sends, receives or both), until done, the
  // deadline, or `stop`. A job's peer state of its direction is touched by one thread only.
  void pump(std::vector<Job>& jobs, Clock::time_point deadline, bool sends, bool receives,
            const std::atomic<bool>* stop) {
    for (;;) {
      if (stop && *stop) return;
      std::vector<pollfd> fds;
      std::vector<Job*> active;
      std::vector<bool> seen(static_cast<std::size_t>(size_) * 2, false);
      bool pending = false;
      for (auto& j : jobs) {
        if (j.send ? !sends : !receives) continue;
        const std::size_t slot = static_cast<std::size_t>(j.peer) * 2 + (j.send ? 1 : 0);
        if (j.done()) continue;
        pending = true;
        if (seen[slot]) continue;
        seen[slot] = true;
        // Make progress without a poll while the socket keeps taking or giving.
        for (int k = 0; k < 8 && !j.done() && step(j); ++k) {
        }
        if (j.done()) continue;
        active.push_back(&j);
        fds.push_back({peers_[static_cast<std::size_t>(j.peer)].fd.get(),
                       static_cast<short>(j.send ? POLLOUT : POLLIN), 0});
      }
      if (!pending) return;
      if (active.empty()) continue;
      // The generation's end (runtime/generation_end.h) wakes the poll at once.
      fds.push_back({generation_end().fd(), POLLIN, 0});
      const int left = millis_left(deadline);
      if (left == 0 || (::poll(fds.data(), fds.size(), stop ? std::min(left, 100) : left) == 0 &&
                        millis_left(deadline) == 0)) {
        std::string who;
        for (const Job* j : active)
          who += (who.empty() ? "" : ", ") + std::string(j->send ? "to " : "from ") + "rank " +
                 std::to_string(j->peer);
        throw Error("frames: rank " + std::to_string(rank_) +
                    ": a collective across hosts did not complete within " +
                    std::to_string(op_timeout_.count() / 1000) + " s (waiting " + who + "). " +
                    std::string(kPeerLossSentence));
      }
      generation_end().check();
    }
  }

  Job send_job(int peer, const void* data, std::size_t bytes) {
    Job j;
    j.peer = peer;
    j.send = true;
    j.data = static_cast<unsigned char*>(const_cast<void*>(data));  // only read
    j.bytes = bytes;
    return j;
  }
  Job recv_job(int peer, void* data, std::size_t bytes,
               std::function<void(std::size_t, std::size_t)> on_frame = {}) {
    Job j;
    j.peer = peer;
    j.send = false;
    j.data = static_cast<unsigned char*>(data);
    j.bytes = bytes;
    j.on_frame = std::move(on_frame);
    return j;
  }

  // --- collectives ---

  void allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
    if (size_ > 1 && count > 0 && count * dtype_size(dtype) <= kSmallAllreduceBytes) {
      allreduce_small(static_cast<unsigned char*>(buf), count, dtype, op);
    } else if (size_ > 1 && count > 0) {
      const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
      ensure_peers({left, right});
      const std::size_t es = dtype_size(dtype);
      const auto n = static_cast<std::size_t>(size_);
      std::vector<std::size_t> off(n + 1, 0);
      for (std::size_t i = 0; i < n; ++i)
        off[i + 1] = off[i] + (count / n + (i < count % n ? 1 : 0)) * es;
      auto* base = static_cast<unsigned char*>(buf);
      scratch_.resize(off[1]);
      const auto seg = [&](int s) { return static_cast<std::size_t>((s % size_ + size_) % size_); };
      for (int s = 0; s < size_ - 1; ++s) {  // reduce-scatter
        const std::size_t out = seg(rank_ - s), in = seg(rank_ - s - 1);
        unsigned char* dst = base + off[in];
        std::vector<Job> jobs;
        jobs.push_back(send_job(right, base + off[out], off[out + 1] - off[out]));
        jobs.push_back(recv_job(left, scratch_.data(), off[in + 1] - off[in],
                                [&, dst](std::size_t o, std::size_t len) {
                                  reduce_into(dst + o, scratch_.data() + o, len / es, dtype, op);
                                }));
        run(jobs);
      }
      for (int s = 0; s < size_ - 1; ++s) {  // allgather of the reduced segments
        const std::size_t out = seg(rank_ + 1 - s), in = seg(rank_ - s);
        std::vector<Job> jobs;
        jobs.push_back(send_job(right, base + off[out], off[out + 1] - off[out]));
        jobs.push_back(recv_job(left, base + off[in], off[in + 1] - off[in]));
        run(jobs);
      }
    }
    if (op == ReduceOp::kAverage) divide_by(buf, count, dtype, size_);
  }

  // Recursive doubling for small messages (latency: log2(size) exchanges of the whole
  // message, where the ring takes 2 (size - 1) steps). A world that is not a power of two
  // first folds: of ranks 0 .. 2 rem - 1 (rem = size - the largest power of two below it),
  // each even rank hands its data to the odd rank above it and gets the result back at the
  // end. Every combination is computed as (lower group's value) op (higher group's value),
  // the order both partners use, so every rank ends with the same bits (for floats, and
  // for NaN under min and max, whatever the op's own symmetry).
  void allreduce_small(unsigned char* buf, std::size_t count, DataType dtype, ReduceOp op) {
    const std::size_t bytes = count * dtype_size(dtype);
    int p2 = 1;
    while (p2 * 2 <= size_) p2 *= 2;
    const int rem = size_ - p2;
    const bool folded = rank_ < 2 * rem && rank_ % 2 == 0;  // sits out the doubling
    const int vr = rank_ < 2 * rem ? rank_ / 2 : rank_ - rem;
    const auto real = [rem](int v) { return v < rem ? 2 * v + 1 : v + rem; };
    std::vector<int> needed;
    if (rank_ < 2 * rem) needed.push_back(rank_ ^ 1);
    if (!folded)
      for (int mask = 1; mask < p2; mask <<= 1) needed.push_back(real(vr ^ mask));
    ensure_peers(needed);
    scratch_.resize(bytes);
    // Combines the partner's value (in scratch_) with this rank's, lower group first.
    const auto combine = [&](bool theirs_lower) {
      if (theirs_lower) {
        reduce_into(scratch_.data(), buf, count, dtype, op);
        std::memcpy(buf, scratch_.data(), bytes);
      } else {
        reduce_into(buf, scratch_.data(), count, dtype, op);
      }
    };
    const auto exchange = [&](int peer, bool send, bool recv, void* into) {
      std::vector<Job> jobs;
      if (send) jobs.push_back(send_job(peer, buf, bytes));
      if (recv) jobs.push_back(recv_job(peer, into, bytes));
      run(jobs);
    };
    if (folded) {
      exchange(rank_ + 1, true, false, nullptr);
      exchange(rank_ + 1, false, true, buf);
      return;
    }
    if (rank_ < 2 * rem) {
      exchange(rank_ - 1, false, true, scratch_.data());
      combine(true);
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
      exchange(real(vr ^ mask), true, true, scratch_.data());
      combine((vr ^ mask) < vr);
    }
    if (rank_ < 2 * rem) exchange(rank_ - 1, true, false, nullptr);
  }

  // A binomial tree rooted at `root`: this rank's parent (-1 at the root) and children.
  std::pair<int, std::vector<int>> tree(int root) const {
    const int vr = (rank_ - root + size_) % size_;
    int parent = -1, mask = 1;
    for (; mask < size_; mask <<= 1)
      if (vr & mask) {
        parent = (vr - mask + root) % size_;
        break;
      }
    std::vector<int> children;
    for (mask >>= 1; mask > 0; mask >>= 1)
      if (vr + mask < size_) children.push_back((vr + mask + root) % size_);
    return {parent, children};
  }

  // The pairs a collective of `topology` needs on this rank (connect()).
  std::vector<int> peers_of(Topology topology, int root) const {
    if (size_ < 2) return {};
    switch (topology) {
      case Topology::kRing:
        return {(rank_ + size_ - 1) % size_, (rank_ + 1) % size_};
      case Topology::kStar:
        return rank_ == root ? all_peers() : std::vector<int>{root};
      case Topology::kFullMesh:
        break;
    }
    return all_peers();
  }

  // Down a binomial tree: each rank receives the whole message from its parent, then sends
  // it to all its children at once (log2(size) steps; the root sends at most log2(size)
  // copies where a star sent size - 1).
  void broadcast(void* buf, std::size_t bytes, int root) {
    if (size_ < 2 || bytes == 0) return;
    auto [parent, children] = tree(root);
    std::vector<int> needed = children;
    if (parent >= 0) needed.push_back(parent);
    ensure_peers(needed);
    if (parent >= 0) {
      std::vector<Job> jobs;
      jobs.push_back(recv_job(parent, buf, bytes));
      run(jobs);
    }
    std::vector<Job> jobs;
    for (int c : children) jobs.push_back(send_job(c, buf, bytes));
    if (!jobs.empty()) run(jobs);
  }

  void allgather(const void* send, void* recv, std::size_t bytes) {
    auto* out = static_cast<unsigned char*>(recv);
    unsigned char* own = out + bytes * static_cast<std::size_t>(rank_);
    if (send != own) std::memmove(own, send, bytes);
    if (size_ < 2 || bytes == 0) return;
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    ensure_peers({left, right});
    const auto blk = [&](int s) {
      return out + bytes * static_cast<std::size_t>((s % size_ + size_) % size_);
    };
    for (int s = 0; s < size_ - 1; ++s) {
      std::vector<Job> jobs;
      jobs.push_back(send_job(right, blk(rank_ - s), bytes));
      jobs.push_back(recv_job(left, blk(rank_ - s - 1), bytes));
      run(jobs);
    }
  }

  void alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                 const std::vector<std::size_t>& recv_bytes) {
    std::size_t so = 0, ro = 0;
    std::vector<Job> jobs;
    const auto* in = static_cast<const unsigned char*>(send);
    auto* out = static_cast<unsigned char*>(recv);
    for (int p = 0; p < size_; ++p) {
      const auto i = static_cast<std::size_t>(p);
      if (p == rank_) {
        if (send_bytes[i] > 0 && in + so != out + ro)
          std::memmove(out + ro, in + so, send_bytes[i]);
      } else {
        jobs.push_back(send_job(p, in + so, send_bytes[i]));
        jobs.push_back(recv_job(p, out + ro, recv_bytes[i]));
      }
      so += send_bytes[i];
      ro += recv_bytes[i];
    }
    if (size_ < 2) return;
    ensure_peers(all_peers());
    run(jobs);
  }

  rendezvous::Store& store_;
  std::string prefix_;
  int rank_;
  int size_;
  std::chrono::milliseconds op_timeout_;
  std::chrono::milliseconds connect_timeout_;
  rendezvous::Hmac hmac_;
  std::string nonce_;
  UniqueFd listener_;
  std::vector<Peer> peers_;
  std::string broken_;
  std::string failure_key_;
  std::vector<unsigned char> scratch_;
};

FrameComm::FrameComm(rendezvous::Store& store, std::string prefix, int rank, int size,
                     const std::string& local_ip, const std::string& secret,
                     std::chrono::milliseconds op_timeout,
                     std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>(store, std::move(prefix), rank, size, local_ip, secret,
                                   op_timeout, connect_timeout)) {}
FrameComm::~FrameComm() = default;

void FrameComm::allreduce(void* buf, std::size_t count, DataType dtype, ReduceOp op) {
  impl_->allreduce(buf, count, dtype, op);
}
void FrameComm::broadcast(void* buf, std::size_t bytes, int root) {
  impl_->broadcast(buf, bytes, root);
}
void FrameComm::allgather(const void* send, void* recv, std::size_t bytes) {
  impl_->allgather(send, recv, bytes);
}
void FrameComm::alltoallv(const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
                          const std::vector<std::size_t>& recv_bytes) {
  impl_->alltoallv(send, send_bytes, recv, recv_bytes);
}
void FrameComm::connect(Topology topology, int root) {
  impl_->ensure_peers(impl_->peers_of(topology, root));
}
void FrameComm::set_failure_key(std::string key) { impl_->failure_key_ = std::move(key); }
int FrameComm::connected_pairs() const {
  int n = 0;
  for (const auto& p : impl_->peers_) n += p.fd ? 1 : 0;
  return n;
}
int FrameComm::socket_for_testing(int peer) const {
  if (peer < 0 || peer >= impl_->size_) return -1;
  return impl_->peers_[static_cast<std::size_t>(peer)].fd.get();
}

}  // namespace hvdrun::runtime
