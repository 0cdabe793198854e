// The Slurm agents' connect-back, both sides: the launcher's port with its handshakes in
// progress (connect_back.h), and the agent's connection to it.
#include "launcher/hosts/connect_back.h"

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

#include <spdlog/spdlog.h>

#include "common/deadline.h"
#include "common/error.h"
#include "common/quote.h"
#include "launcher/plan/local_host.h"
#include "rendezvous/protocol.h"

namespace hvdrun::launcher {
namespace {

namespace rv = rendezvous;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kNonceBytes = 32;
constexpr std::uint32_t kMaxHelloText = 4096;

// The agent's proof: it holds the secret, answers this launcher nonce, and says which
// node it is and which address it reached.
std::string agent_tag(const rv::Hmac& key, std::string_view launcher_nonce,
                      std::string_view agent_nonce, std::string_view text) {
  auto t = key.tag({"hvdrun-slurm-agent", launcher_nonce, agent_nonce, text});
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}

// The launcher's proof, over the same values in the other order and under another label:
// neither proof can be replayed as the other.
std::string launcher_tag(const rv::Hmac& key, std::string_view launcher_nonce,
                         std::string_view agent_nonce, std::string_view text) {
  auto t = key.tag({"hvdrun-slurm-launcher", agent_nonce, launcher_nonce, text});
  return std::string(reinterpret_cast<const char*>(t.data()), t.size());
}

bool same_tag(const std::string& a, const std::string& b) {
  return a.size() == rv::kMacBytes && b.size() == rv::kMacBytes &&
         rv::tags_equal(reinterpret_cast<const unsigned char*>(a.data()),
                        reinterpret_cast<const unsigned char*>(b.data()));
}

std::string ipv4_text(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

// "IP:PORT" of one end of a connected IPv4 socket, or empty.
std::string end_text(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0 || a.sin_family != AF_INET) return {};
  return ipv4_text(a.sin_addr) + ":" + std::to_string(ntohs(a.sin_port));
}

// Reads exactly `n` bytes before `deadline`; false on EOF, error or timeout.
bool read_exact(int fd, char* buf, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    const int left = poll_ms_left(deadline);
    if (left == 0) return false;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, left);
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

UniqueFd listen_on(const std::string& address, std::uint16_t port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) throw_errno("listening for agents", "socket");
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (::inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) {
    throw LaunchError("listening for agents: bad address '" + address + "'");
  }
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    throw_errno("listening for agents on " + address + ":" + std::to_string(port), "bind");
  }
  if (::listen(s.get(), SOMAXCONN) != 0) throw_errno("listening for agents", "listen");
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
                                 PreauthPolicy policy, ConnectBackSettings settings)
    : settings_(std::move(settings)),
      listener_(listen_on(bind_address, settings_.port)),
      port_(port_of(listener_.get())),
      secret_(secret),
      gate_(settings_.name + " " + std::to_string(port_), "that have not authenticated", policy) {}

ConnectBackPort::~ConnectBackPort() { gate_.flush(); }

std::vector<ConnectedAgent> ConnectBackPort::serve(Clock::time_point until) {
  std::vector<ConnectedAgent> done;
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> keys;
  for (bool polled = false;; polled = true) {
    auto now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second->deadline > now) {
        ++it;
        continue;
      }
      gate_.leave(it->second->id);
      it = pending_.erase(it);
    }
    if (!done.empty() || (now >= until && polled)) return done;

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
                       settings_.name + " " + std::to_string(port_) + ": accept failed: " +
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
    const std::uint32_t len = rv::get_u32(p.in.data());
    if (len > kMaxHelloText) {
      gate_.refuse("oversized hello", settings_.name + " " + std::to_string(port_) +
                                          ": a connection from " + p.source + " announced a " +
                                          std::to_string(len) + "-byte hello; closed");
      return drop(key);
    }
    p.want = 4 + std::size_t{len} + kNonceBytes + rv::kMacBytes;
    return;
  }
  const std::string_view hello(p.in);
  const std::string text(hello.substr(4, p.want - 4 - kNonceBytes - rv::kMacBytes));
  const std::string agent_nonce(hello.substr(4 + text.size(), kNonceBytes));
  const std::string tag(hello.substr(p.want - rv::kMacBytes));
  const rv::Hmac mac(secret_);
  const std::string where = settings_.name + " " + std::to_string(port_) + ": ";
  const auto nl1 = text.find('\n');
  // The peer's address, and for a local one its owner too.
  const std::string from = end_text(p.sock.get(), true) +
                           (p.source.rfind("uid ", 0) == 0 ? " (" + p.source + ")" : std::string());
  if (!same_tag(tag, agent_tag(mac, p.nonce, agent_nonce, text))) {
    gate_.refuse("wrong secret", where + "a connection from " + from + " claiming to be " +
                                     quote(text.substr(0, nl1)) + " did not prove " +
                                     settings_.secret_name + "; closed");
    return drop(key);
  }
  // NODE \n JOB.STEP \n the address the agent connected to. A relay that passes the
  // handshake along reaches this port from its own connection, so the address the agent
  // named is not the one this connection arrived at.
  const auto nl2 = nl1 == std::string::npos ? nl1 : text.find('\n', nl1 + 1);
  const std::string reached = end_text(p.sock.get(), false);
  if (nl2 == std::string::npos || (settings_.check_reached && text.substr(nl2 + 1) != reached)) {
    gate_.refuse("relayed", where + "an agent's connection from " + p.source + " was meant for " +
                                (nl2 == std::string::npos ? "?" : text.substr(nl2 + 1)) +
                                " but arrived at " + reached +
                                " (passed along by something in between); closed");
    return drop(key);
  }
  const std::string proof = launcher_tag(mac, p.nonce, agent_nonce, text);
  if (::send(p.sock.get(), proof.data(), proof.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(proof.size()))
    return drop(key);
  gate_.leave(p.id);
  set_nonblocking(p.sock.get(), false);
  done.push_back(
      {text.substr(0, nl1), text.substr(nl1 + 1, nl2 - nl1 - 1), std::move(p.sock), text, from});
  pending_.erase(key);
}

void ConnectBackPort::drop(std::uint64_t key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  gate_.leave(it->second->id);
  pending_.erase(it);
}

std::string machine_identity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  char net[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", net, sizeof net - 1);
  if (boot.empty() || n <= 0) return {};
  return boot + " " + std::string(net, static_cast<std::size_t>(n));
}

namespace {

std::string this_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

struct LauncherAddress {
  std::string text;  // "IP:PORT" as the launcher listed it
  sockaddr_in addr{};
};

std::vector<LauncherAddress> parse_targets(const std::string& targets) {
  std::vector<LauncherAddress> out;
  for (std::size_t start = 0; start <= targets.size();) {
    auto comma = targets.find(',', start);
    const std::string t =
        targets.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto colon = t.rfind(':');
    LauncherAddress target{t, {}};
    target.addr.sin_family = AF_INET;
    std::uint16_t port = 0;
    if (colon != std::string::npos) {
      auto [end, ec] = std::from_chars(t.data() + colon + 1, t.data() + t.size(), port);
      target.addr.sin_port = htons(port);
      if (ec == std::errc() && end == t.data() + t.size() && port != 0 &&
          ::inet_pton(AF_INET, t.substr(0, colon).c_str(), &target.addr.sin_addr) == 1)
        out.push_back(target);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// This node's own IPv4 addresses (every interface, loopback included).
std::vector<in_addr_t> own_ipv4() {
  std::vector<in_addr_t> out;
  for (const std::string& ip : local_addresses()) {
    in_addr v4{};
    if (::inet_pton(AF_INET, ip.c_str(), &v4) == 1) out.push_back(v4.s_addr);
  }
  return out;
}

bool is_loopback(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }

// The targets that can only be the launcher's. On the launcher's own machine (same boot
// and network namespace) every listed address is, loopback first. Elsewhere an address
// this node also has (loopback, or a docker0-style address present on both) would reach a
// socket on this node, which anyone here may have bound: such targets are left out, and
// `skipped` names them.
std::vector<LauncherAddress> launcher_targets(std::vector<LauncherAddress> all, bool same_machine,
                                              std::string& skipped) {
  if (same_machine) {
    std::stable_partition(all.begin(), all.end(),
                          [](const LauncherAddress& t) { return is_loopback(t.addr.sin_addr); });
    return all;
  }
  const auto mine = own_ipv4();
  std::vector<LauncherAddress> out;
  for (auto& t : all) {
    if (is_loopback(t.addr.sin_addr) ||
        std::find(mine.begin(), mine.end(), t.addr.sin_addr.s_addr) != mine.end()) {
      skipped += (skipped.empty() ? "" : ", ") + t.text;
    } else {
      out.push_back(std::move(t));
    }
  }
  return out;
}

UniqueFd connect_to(const LauncherAddress& t, std::string& error) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  timeval tv{5, 0};
  ::setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&t.addr), sizeof t.addr) == 0) return s;
  error = std::strerror(errno);
  return {};
}

// The Slurm agent's hello TEXT: NODE, JOB.STEP, the address it connected to.
std::string slurm_hello_text(const LauncherAddress& t) {
  const char* node = std::getenv("SLURMD_NODENAME");
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* stepid = std::getenv("SLURM_STEP_ID");
  return (node ? std::string(node) : this_host()) + "\n" + (job ? job : "") +
         (job && stepid ? std::string(".") + stepid : "") + "\n" + t.text;
}

}  // namespace

UniqueFd connect_to_launcher(const std::string& targets, const std::string& secret,
                             const std::string& launcher_identity) {
  const bool same_machine = !launcher_identity.empty() && launcher_identity == machine_identity();
  std::string skipped;
  const auto list = launcher_targets(parse_targets(targets), same_machine, skipped);
  const std::string left_out =
      skipped.empty() ? std::string()
                      : " (left out: " + skipped +
                            ", which would reach this node itself: the launcher runs on "
                            "another machine or network namespace)";
  if (list.empty()) {
    throw LaunchError("no address of the launcher can be told apart from this node's own in '" +
                      targets + "'" + left_out +
                      "; use --network-interface to choose an address only the launcher's "
                      "machine has");
  }
  std::string errors;
  for (const auto& t : list) {
    std::string error;
    UniqueFd s = connect_to(t, error);
    bool refused = false;
    if (s)
      error = prove_to_listener(s.get(), slurm_hello_text(t), secret,
                                Clock::now() + std::chrono::seconds(10), refused);
    if (error.empty()) return s;
    // Nothing was acted on and nothing but a proof went out: try the next address.
    spdlog::warn("the listener at {} is not the launcher: {}", t.text, error);
    errors += " " + t.text + ": " + error + ";";
  }
  throw LaunchError("cannot reach the launcher at any of" + errors + left_out +
                    " use --network-interface to choose the address");
}

// Both proofs over one connection. Nothing that arrives on the socket is read beyond the
// listener's proof: the agent protocol that follows is run_agent's.
std::string prove_to_listener(int fd, const std::string& text, const std::string& secret,
                              Clock::time_point deadline, bool& refused) {
  refused = false;
  std::string launcher_nonce(kNonceBytes, '\0');
  if (!read_exact(fd, launcher_nonce.data(), launcher_nonce.size(), deadline))
    return "no greeting in time";
  const std::string agent_nonce = rv::random_bytes(kNonceBytes);
  const rv::Hmac key(secret);
  const auto len = static_cast<std::uint32_t>(text.size());
  const char len_bytes[4] = {static_cast<char>(len >> 24), static_cast<char>(len >> 16),
                             static_cast<char>(len >> 8), static_cast<char>(len)};
  if (!send_all(fd, std::string_view(len_bytes, 4)) || !send_all(fd, text) ||
      !send_all(fd, agent_nonce) ||
      !send_all(fd, agent_tag(key, launcher_nonce, agent_nonce, text)))
    return "the connection broke during the handshake";
  std::string proof(rv::kMacBytes, '\0');
  if (!read_exact(fd, proof.data(), proof.size(), deadline)) {
    refused = true;
    return "it did not prove the secret (closed or silent)";
  }
  if (!same_tag(proof, launcher_tag(key, launcher_nonce, agent_nonce, text)))
    return "it did not prove the secret (a wrong proof)";
  return {};
}

}  // namespace hvdrun::launcher
