// The Slurm agents' connect-back, both sides: the launcher's port with its handshakes in
// progress (connect_back.h), and the agent's connection to it.
#include "launcher/connect_back.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "common/error.h"
#include "rendezvous/protocol.h"

namespace hvdrun::launcher {
namespace {

namespace rv = rendezvous;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kNonceBytes = 32;
constexpr std::uint32_t kMaxHelloText = 4096;
constexpr const char* kTagLabel = "hvdrun-slurm-agent";

std::string tag_of(const rv::Hmac& key, std::string_view nonce, std::string_view text) {
  auto t = key.tag({kTagLabel, nonce, text});
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}

std::uint32_t get_u32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

// Reads exactly `n` bytes before `deadline`; false on EOF, error or timeout.
bool read_exact(int fd, char* buf, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (rc < 0 && errno != EINTR) return false;
    if (rc <= 0) continue;
    ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t w = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(w));
  }
  return true;
}

UniqueFd listen_on(const std::string& address) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) throw_errno("listening for Slurm agents", "socket");
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    throw LaunchError("listening for Slurm agents: bad address '" + address + "'");
  }
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw_errno("listening for Slurm agents on " + address, "bind");
  }
  if (::listen(s.get(), SOMAXCONN) != 0) throw_errno("listening for Slurm agents", "listen");
  return s;
}

std::uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

}  // namespace

// A connection whose hello is still arriving.
struct ConnectBackPort::Pending {
  UniqueFd sock;
  std::string source;  // the gate's unit: a local uid or a remote address
  std::string nonce;
  std::string in;        // the hello so far
  std::size_t want = 4;  // bytes of the hello known to be due: the length, then all
  Clock::time_point deadline;
  PendingCap::Id id = 0;
};

ConnectBackPort::ConnectBackPort(const std::string& bind_address, const std::string& secret,
                                 PreauthPolicy policy)
    : listener_(listen_on(bind_address)),
      port_(port_of(listener_.get())),
      secret_(secret),
      gate_("Slurm agents' port " + std::to_string(port_), "that have not authenticated", policy) {}

ConnectBackPort::~ConnectBackPort() { gate_.flush(); }

std::vector<ConnectedAgent> ConnectBackPort::serve(Clock::time_point until) {
  std::vector<ConnectedAgent> done;
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> keys;
  for (;;) {
    auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second->deadline > now) {
        ++it;
        continue;
      }
      gate_.leave(it->second->id);
      it = pending_.erase(it);
    }
    if (!done.empty() || now >= until) return done;

    fds.clear();
    keys.clear();
    auto wake = until;
    const bool accepting = now >= accept_paused_until_;
    if (accepting) {
      fds.push_back({listener_.get(), POLLIN, 0});
      keys.push_back(0);
    } else {
      wake = std::min(wake, accept_paused_until_);
    }
    for (const auto& [key, p] : pending_) {
      fds.push_back({p->sock.get(), POLLIN, 0});
      keys.push_back(key);
      wake = std::min(wake, p->deadline);
    }
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(ms, 0)));
    if (rc < 0 && errno != EINTR) throw_errno("the Slurm agents' port", "poll");
    if (rc <= 0) continue;
    now = Clock::now();
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (keys[i] == 0) {
        accept_all(now);
      } else if (pending_.count(keys[i]) != 0) {
        advance(keys[i], done);
      }
    }
  }
}

void ConnectBackPort::accept_all(Clock::time_point now) {
  for (;;) {
    UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN) {
        accept_backoff_ = std::chrono::milliseconds(0);
        return;
      }
      // Out of descriptors or memory: the connection stays queued, and accepting again at
      // once would fail again at once. Serve the handshakes in progress meanwhile.
      accept_backoff_ = std::clamp(accept_backoff_ * 2, std::chrono::milliseconds(10),
                                   std::chrono::milliseconds(500));
      gate_.log().warn(std::string("accept: ") + std::strerror(errno),
                       "Slurm agents' port " + std::to_string(port_) + ": accept failed: " +
                           std::strerror(errno) + "; retrying with backoff (up to 500 ms)");
      accept_paused_until_ = now + accept_backoff_;
      return;
    }
    auto p = std::make_unique<Pending>();
    p->nonce = rv::random_bytes(kNonceBytes);
    // 32 bytes into a fresh connection's empty send buffer: all of it, or the peer is gone.
    if (::send(conn.get(), p->nonce.data(), p->nonce.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(p->nonce.size()))
      continue;
    p->source = connection_source(conn.get());
    p->sock = std::move(conn);
    p->deadline = gate_.deadline(now);
    const std::uint64_t key = next_key_++;
    Pending& entry = *p;
    pending_.emplace(key, std::move(p));
    entry.id = gate_.enter(entry.source, [this, key] { drop(key); });
  }
}

void ConnectBackPort::advance(std::uint64_t key, std::vector<ConnectedAgent>& done) {
  Pending& p = *pending_.at(key);
  char buf[512];
  const std::size_t room = std::min(sizeof buf, p.want - p.in.size());
  const ssize_t n = ::recv(p.sock.get(), buf, room, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) return drop(key);
  p.in.append(buf, static_cast<std::size_t>(n));
  if (p.in.size() < p.want) return;
  if (p.want == 4) {
    const std::uint32_t len = get_u32(p.in.data());
    if (len > kMaxHelloText) {
      gate_.refuse("oversized hello", "Slurm agents' port " + std::to_string(port_) +
                                          ": a connection from " + p.source + " announced a " +
                                          std::to_string(len) + "-byte hello; closed");
      return drop(key);
    }
    p.want = 4 + std::size_t{len} + rv::kMacBytes;
    return;
  }
  const std::string text = p.in.substr(4, p.want - 4 - rv::kMacBytes);
  const std::string tag = p.in.substr(p.want - rv::kMacBytes);
  const std::string want = tag_of(rv::Hmac(secret_), p.nonce, text);
  if (!rv::tags_equal(reinterpret_cast<const unsigned char*>(want.data()),
                      reinterpret_cast<const unsigned char*>(tag.data()))) {
    gate_.refuse("wrong secret", "Slurm agents' port " + std::to_string(port_) +
                                     ": a connection from " + p.source +
                                     " did not prove the step's secret; closed");
    return drop(key);
  }
  gate_.leave(p.id);
  set_nonblocking(p.sock.get(), false);
  const auto nl = text.find('\n');
  done.push_back(
      {text.substr(0, nl), nl == std::string::npos ? "" : text.substr(nl + 1), std::move(p.sock)});
  pending_.erase(key);
}

void ConnectBackPort::drop(std::uint64_t key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  gate_.leave(it->second->id);
  pending_.erase(it);
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

namespace {

std::string this_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// Connects to the first of `targets` (ADDR:PORT,...) that answers; loopback first when
// this is the launcher's own machine.
UniqueFd connect_any(const std::string& targets, bool same_machine) {
  std::vector<std::string> list;
  for (std::size_t start = 0; start <= targets.size();) {
    auto comma = targets.find(',', start);
    list.push_back(
        targets.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (same_machine) {
    std::stable_partition(list.begin(), list.end(),
                          [](const std::string& t) { return t.rfind("127.", 0) == 0; });
  }
  std::string errors;
  for (const auto& t : list) {
    const auto colon = t.rfind(':');
    if (colon == std::string::npos) continue;
    std::uint16_t port = 0;
    auto [end, ec] = std::from_chars(t.data() + colon + 1, t.data() + t.size(), port);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (ec != std::errc() || end != t.data() + t.size() ||
        ::inet_pton(AF_INET, t.substr(0, colon).c_str(), &a.sin_addr) != 1) {
      continue;
    }
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    timeval tv{5, 0};
    ::setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
    errors += " " + t + ": " + std::strerror(errno) + ";";
  }
  throw LaunchError("cannot reach the launcher at any of" + errors +
                    " use --network-interface to choose the address");
}

}  // namespace

UniqueFd connect_to_launcher(const std::string& targets, const std::string& secret,
                             const std::string& launcher_boot) {
  UniqueFd sock = connect_any(targets, !launcher_boot.empty() && launcher_boot == boot_id());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::string nonce(kNonceBytes, '\0');
  if (!read_exact(sock.get(), nonce.data(), nonce.size(), deadline)) {
    throw LaunchError("the launcher did not greet within 30 s");
  }
  const char* node = std::getenv("SLURMD_NODENAME");
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* stepid = std::getenv("SLURM_STEP_ID");
  std::string text = (node ? std::string(node) : this_host()) + "\n" + (job ? job : "") +
                     (job && stepid ? std::string(".") + stepid : "");
  const rv::Hmac key(secret);
  const std::uint32_t len = static_cast<std::uint32_t>(text.size());
  const char len_bytes[4] = {static_cast<char>(len >> 24), static_cast<char>(len >> 16),
                             static_cast<char>(len >> 8), static_cast<char>(len)};
  if (!send_all(sock.get(), std::string_view(len_bytes, 4)) || !send_all(sock.get(), text) ||
      !send_all(sock.get(), tag_of(key, nonce, text))) {
    throw LaunchError("the connection to the launcher broke during the handshake");
  }
  return sock;
}

}  // namespace hvdrun::launcher
