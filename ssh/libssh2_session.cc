// libssh2-backed Connector, Session and Channel. Every libssh2 call runs in non-blocking
// mode and is retried after poll() on the directions libssh2 reports, until a deadline;
// nothing here can hang on a silent peer.
#include "ssh/libssh2_session.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/fd.h"
#include "common/seconds_text.h"
#include "ssh/known_hosts.h"
#include "ssh/libssh2_errors.h"

namespace hvdrun::ssh {
namespace {

using std::chrono::milliseconds;

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { libssh2_init(0); });
}

long long ms_left(Deadline deadline) {
  return std::max<long long>(
      0, std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
}

std::string format_address(const sockaddr* sa, bool with_port) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    auto* sin = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &sin->sin_addr, host, sizeof host);
    port = ntohs(sin->sin_port);
    return with_port ? std::string(host) + ":" + std::to_string(port) : host;
  }
  if (sa->sa_family == AF_INET6) {
    auto* sin6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof host);
    port = ntohs(sin6->sin6_port);
    return with_port ? "[" + std::string(host) + "]:" + std::to_string(port) : host;
  }
  return "?";
}

// --- name resolution under a deadline ---------------------------------------------------

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  std::string text;  // "ip:port"
};

struct Resolution {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  int rc = 0;
  std::vector<Address> addresses;
};

void collect(addrinfo* res, std::vector<Address>& out) {
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    Address a;
    std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
    a.length = ai->ai_addrlen;
    a.text = format_address(ai->ai_addr, true);
    bool dup =
        std::any_of(out.begin(), out.end(), [&](const Address& b) { return b.text == a.text; });
    if (!dup) out.push_back(std::move(a));
  }
}

// getaddrinfo cannot be cancelled, so it runs on its own detached thread and we wait for
// it only until the deadline; a late answer is simply dropped.
std::vector<Address> resolve(const Target& t, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  const std::string port = std::to_string(t.port);
  addrinfo* res = nullptr;
  if (::getaddrinfo(t.hostname.c_str(), port.c_str(), &hints, &res) == 0) {
    std::vector<Address> out;
    collect(res, out);
    ::freeaddrinfo(res);
    return out;
  }
  auto state = std::make_shared<Resolution>();
  std::thread([state, name = t.hostname, port] {
    addrinfo h{};
    h.ai_family = AF_UNSPEC;
    h.ai_socktype = SOCK_STREAM;
    h.ai_flags = AI_NUMERICSERV;
    addrinfo* r = nullptr;
    int rc = ::getaddrinfo(name.c_str(), port.c_str(), &h, &r);
    std::vector<Address> out;
    if (rc == 0) {
      collect(r, out);
      ::freeaddrinfo(r);
    }
    std::lock_guard lock(state->mutex);
    state->rc = rc;
    state->addresses = std::move(out);
    state->done = true;
    state->cv.notify_all();
  }).detach();
  std::unique_lock lock(state->mutex);
  if (!state->cv.wait_until(lock, deadline, [&] { return state->done; })) {
    throw ConnectError(
        Verdict::dns,
        "resolving '" + t.hostname + "' did not finish within " + seconds_text(t.connect_timeout) +
            " s",
        "check the DNS servers in /etc/resolv.conf, or put the address in HostName (ssh_config) or "
        "-H");
  }
  if (state->rc != 0 || state->addresses.empty()) {
    std::string why = state->rc == 0 ? "no addresses" : ::gai_strerror(state->rc);
    std::string fix = "check the spelling in -H/--hostfile";
    if (t.hostname != t.alias) fix += " and the HostName for '" + t.alias + "' in ssh_config";
    fix += ", or use the host's IP address";
    throw ConnectError(Verdict::dns, "'" + t.hostname + "' does not resolve: " + why, fix);
  }
  return std::move(state->addresses);
}

// --- TCP connect ----------------------------------------------------------------------

UniqueFd connect_any(const Target& t, const std::vector<Address>& addresses, Deadline deadline,
                     std::string& connected) {
  std::vector<std::string> errors;
  bool timed_out = false, all_refused = true;
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    const Address& a = addresses[i];
    auto left = deadline - Clock::now();
    auto attempt_deadline = Clock::now() + left / static_cast<long>(addresses.size() - i);
    UniqueFd fd(::socket(a.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) throw_errno("ssh " + t.alias + ": creating a socket", "socket");
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.length) < 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd pfd{fd.get(), POLLOUT, 0};
        int rc;
        do {
          rc = ::poll(&pfd, 1, static_cast<int>(ms_left(attempt_deadline)));
        } while (rc < 0 && errno == EINTR);
        if (rc == 0) {
          timed_out = true;
          all_refused = false;
          errors.push_back(a.text + ": no answer");
          continue;
        }
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      connected = a.text;
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (err != ECONNREFUSED) all_refused = false;
    errors.push_back(a.text + ": " + std::strerror(err));
  }
  std::string detail;
  for (const auto& e : errors) detail += (detail.empty() ? "" : "; ") + e;
  const std::string address = addresses.empty() ? t.hostname : addresses.front().text;
  if (timed_out) {
    throw ConnectError(
        Verdict::timeout,
        "no TCP answer within " + seconds_text(t.connect_timeout) + " s (" + detail + ")",
        "check that the host is up and no firewall drops port " + std::to_string(t.port) +
            "; raise ConnectTimeout in ssh_config if the network is slow",
        address);
  }
  throw ConnectError(
      Verdict::refused, "cannot connect (" + detail + ")",
      all_refused ? "start sshd on the host, or give the right port (-p, or Port in ssh_config)"
                  : "check the route to the host and that it is up",
      address);
}

// Waits for the server's first bytes and checks they look like "SSH-".
void expect_banner(const Target& t, int fd, const std::string& address, Deadline deadline) {
  auto fail = [&](Verdict v, const std::string& detail) {
    throw ConnectError(v, detail,
                       "check that port " + std::to_string(t.port) + " on " + t.hostname +
                           " is sshd (-p, or Port in ssh_config)",
                       address);
  };
  pollfd pfd{fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, static_cast<int>(ms_left(deadline)));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    fail(Verdict::not_ssh,
         "accepted TCP but sent no SSH banner within " + seconds_text(t.connect_timeout) + " s");
  }
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_PEEK);
  if (n == 0)
    fail(Verdict::not_ssh,
         "closed the connection without an SSH banner (sshd MaxStartups or a firewall?)");
  if (n < 0) fail(Verdict::refused, std::string("connection failed: ") + std::strerror(errno));
  std::string_view text(buf, static_cast<std::size_t>(n));
  if (std::string_view("SSH-").substr(0, text.size()) == text.substr(0, 4)) return;
  if (text.find("\nSSH-") != std::string_view::npos) return;
  std::string shown(text.substr(0, std::min<std::size_t>(text.find_first_of("\r\n"), 40)));
  for (auto& c : shown) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '.';
  }
  fail(Verdict::not_ssh, "answered '" + shown + "' instead of an SSH banner");
}

// --- the libssh2 session core -----------------------------------------------------------

// Owns the libssh2 session and its socket; shared by the Session and its Channels so a
// channel never outlives the connection it runs on.
struct Core {
  std::shared_ptr<void> tunnel;  // ProxyJump: the Tunnel carrying `fd`; outlives the session
  LIBSSH2_SESSION* session = nullptr;
  UniqueFd fd;
  std::string label;  // "ssh node1 (127.0.0.2:22022)"
  int keepalive_interval = -1;

  Core() = default;
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core() {
    if (session == nullptr) return;
    libssh2_session_disconnect(session, "hvdrun closing");  // one try: never wait here
    if (fd) ::shutdown(fd.get(), SHUT_RDWR);  // any pending channel close now fails fast
    for (int i = 0; i < 100 && libssh2_session_free(session) == LIBSSH2_ERROR_EAGAIN; ++i) {
    }
  }

  std::string last_error() const {
    char* msg = nullptr;
    int len = 0;
    int rc = libssh2_session_last_error(session, &msg, &len, 0);
    return libssh2_error_text(rc, msg && len > 0
                                      ? std::string_view(msg, static_cast<std::size_t>(len))
                                      : std::string_view());
  }

  short events() const {
    short ev = POLLIN;
    if (libssh2_session_block_directions(session) & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
    return ev;
  }

  // Waits for the socket per libssh2's block directions; false once the deadline passed.
  bool wait(Deadline deadline) const {
    auto left = ms_left(deadline);
    if (left <= 0) return false;
    pollfd pfd{fd.get(), events(), 0};
    int rc = ::poll(&pfd, 1, static_cast<int>(left));
    return rc != 0 || Clock::now() < deadline;
  }

  // Retries an int-returning libssh2 call until it stops saying EAGAIN or the deadline.
  template <typename F>
  int call(Deadline deadline, F f) const {
    for (;;) {
      int rc = f();
      if (rc != LIBSSH2_ERROR_EAGAIN) return rc;
      if (!wait(deadline)) return LIBSSH2_ERROR_TIMEOUT;
    }
  }
};

class Libssh2Channel : public Channel {
 public:
  Libssh2Channel(std::shared_ptr<Core> core, LIBSSH2_CHANNEL* channel)
      : core_(std::move(core)), channel_(channel) {}
  Libssh2Channel(const Libssh2Channel&) = delete;
  Libssh2Channel& operator=(const Libssh2Channel&) = delete;
  ~Libssh2Channel() override {
    // One non-blocking attempt: a channel whose peer has already closed (the normal case,
    // after exit_status()) is freed at once; otherwise libssh2 keeps it on the session's
    // list and the session's teardown finishes it, so a dead peer never stalls us here.
    libssh2_channel_free(channel_);
  }

  std::ptrdiff_t read(Stream stream, char* buf, std::size_t size) override {
    auto n = libssh2_channel_read_ex(channel_, stream == Stream::err ? SSH_EXTENDED_DATA_STDERR : 0,
                                     buf, size);
    if (n == LIBSSH2_ERROR_EAGAIN) return kWouldBlock;
    if (n < 0) throw SessionError(core_->label + ": reading remote output: " + core_->last_error());
    return n;
  }

  std::ptrdiff_t write(const char* data, std::size_t size) override {
    auto n = libssh2_channel_write_ex(channel_, 0, data, size);
    if (n == LIBSSH2_ERROR_EAGAIN) return kWouldBlock;
    if (n < 0)
      throw SessionError(core_->label + ": writing to remote stdin: " + core_->last_error());
    return n;
  }

  bool send_eof() override {
    int rc = libssh2_channel_send_eof(channel_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return false;
    if (rc < 0) throw SessionError(core_->label + ": closing remote stdin: " + core_->last_error());
    return true;
  }

  bool eof() override { return libssh2_channel_eof(channel_) == 1; }

  std::optional<ExitStatus> exit_status() override {
    if (status_) return status_;
    if (!eof()) return std::nullopt;
    if (!close_sent_) {
      int rc = libssh2_channel_close(channel_);
      if (rc == LIBSSH2_ERROR_EAGAIN) return std::nullopt;
      if (rc < 0)
        throw SessionError(core_->label + ": closing the channel: " + core_->last_error());
      close_sent_ = true;
    }
    int rc = libssh2_channel_wait_closed(channel_);
    if (rc == LIBSSH2_ERROR_EAGAIN) return std::nullopt;
    if (rc < 0)
      throw SessionError(core_->label + ": waiting for the exit status: " + core_->last_error());
    ExitStatus status;
    status.code = libssh2_channel_get_exit_status(channel_);
    char* signal = nullptr;
    std::size_t signal_len = 0;
    if (libssh2_channel_get_exit_signal(channel_, &signal, &signal_len, nullptr, nullptr, nullptr,
                                        nullptr) == 0 &&
        signal != nullptr) {
      status.signal.assign(signal, signal_len);
      libssh2_free(core_->session, signal);
    }
    status_ = status;
    return status_;
  }

 private:
  std::shared_ptr<Core> core_;
  LIBSSH2_CHANNEL* channel_;
  bool close_sent_ = false;
  std::optional<ExitStatus> status_;
};

class Libssh2Session : public Session {
 public:
  Libssh2Session(std::shared_ptr<Core> core, Target target)
      : core_(std::move(core)), target_(std::move(target)) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(core_->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      local_ = format_address(reinterpret_cast<sockaddr*>(&ss), false);
    }
    len = sizeof ss;
    if (::getpeername(core_->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      peer_ = format_address(reinterpret_cast<sockaddr*>(&ss), true);
      peer_ip_ = format_address(reinterpret_cast<sockaddr*>(&ss), false);
    }
  }

  /// Behind a ProxyJump the socket is one end of a socketpair: the addresses that matter
  /// are this machine's toward the (last) jump host and the target's as written.
  void set_jumped(std::string local, std::string peer, std::string peer_ip) {
    local_ = std::move(local);
    peer_ = std::move(peer);
    peer_ip_ = std::move(peer_ip);
  }
  std::shared_ptr<Core> core() const { return core_; }

  const Target& target() const override { return target_; }
  int fd() const override { return core_->fd.get(); }
  short poll_events() const override { return core_->events(); }
  std::string local_address() const override { return local_; }
  std::string peer_address() const override { return peer_; }
  std::string peer_ip() const override { return peer_ip_; }
  std::string note() const override { return note_; }
  void set_note(std::string note) { note_ = std::move(note); }

  std::unique_ptr<Channel> exec(const std::string& command, Deadline deadline) override {
    LIBSSH2_CHANNEL* channel = nullptr;
    for (;;) {
      channel = libssh2_channel_open_session(core_->session);
      if (channel != nullptr) break;
      if (libssh2_session_last_errno(core_->session) != LIBSSH2_ERROR_EAGAIN) {
        throw SessionError(core_->label + ": opening a channel: " + core_->last_error());
      }
      if (!core_->wait(deadline))
        throw SessionError(core_->label + ": opening a channel timed out");
    }
    auto result = std::make_unique<Libssh2Channel>(core_, channel);
    int rc = core_->call(deadline, [&] {
      return libssh2_channel_process_startup(channel, "exec", 4, command.data(),
                                             static_cast<unsigned>(command.size()));
    });
    if (rc == LIBSSH2_ERROR_TIMEOUT)
      throw SessionError(core_->label + ": starting `" + command + "` timed out");
    if (rc < 0)
      throw SessionError(core_->label + ": starting `" + command + "`: " + core_->last_error());
    return result;
  }

  int keepalive(int interval_s) override {
    if (interval_s != core_->keepalive_interval) {
      libssh2_keepalive_config(core_->session, 1, static_cast<unsigned>(std::max(interval_s, 0)));
      core_->keepalive_interval = interval_s;
    }
    if (interval_s <= 0) return 0;
    int next = 0;
    int rc = libssh2_keepalive_send(core_->session, &next);
    if (rc < 0 && rc != LIBSSH2_ERROR_EAGAIN) {
      throw SessionError(core_->label + ": sending a keepalive: " + core_->last_error());
    }
    return next;
  }

 private:
  std::shared_ptr<Core> core_;
  Target target_;
  std::string local_;
  std::string peer_;
  std::string peer_ip_;
  std::string note_;
};

// --- ProxyJump ----------------------------------------------------------------------------

// One TCP stream through a direct-tcpip channel of the jump host's session. The target's
// session speaks SSH over one end of a socketpair; this thread copies between the other end
// and the channel, and owns the jump session from then on (libssh2 sessions are used from
// one thread at a time). It ends when either side closes or when the Tunnel is destroyed.
class Tunnel {
 public:
  Tunnel(std::shared_ptr<Core> jump, LIBSSH2_CHANNEL* channel, UniqueFd local)
      : jump_(std::move(jump)), channel_(channel), local_(std::move(local)) {
    std::tie(wake_r_, wake_w_) = make_pipe();
    set_nonblocking(local_.get());
    thread_ = std::thread([this] { run(); });
  }
  ~Tunnel() {
    (void)!::write(wake_w_.get(), "x", 1);
    thread_.join();
    libssh2_channel_free(channel_);
  }
  Tunnel(const Tunnel&) = delete;
  Tunnel& operator=(const Tunnel&) = delete;

 private:
  // One round of copying both ways; false once the stream is over.
  bool pump(bool& moved) {
    char buf[32768];
    if (to_local_.empty()) {
      auto n = libssh2_channel_read(channel_, buf, sizeof buf);
      if (n > 0) to_local_.assign(buf, static_cast<std::size_t>(n));
      if (n == 0 && libssh2_channel_eof(channel_)) return false;
      if (n < 0 && n != LIBSSH2_ERROR_EAGAIN) return false;
    }
    if (!to_local_.empty()) {
      auto n = ::send(local_.get(), to_local_.data(), to_local_.size(), MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) to_local_.erase(0, static_cast<std::size_t>(n)), moved = true;
    }
    if (to_channel_.empty()) {
      auto n = ::recv(local_.get(), buf, sizeof buf, 0);
      if (n == 0) return false;  // the target's session is closed
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) to_channel_.assign(buf, static_cast<std::size_t>(n));
    }
    if (!to_channel_.empty()) {
      auto n = libssh2_channel_write(channel_, to_channel_.data(), to_channel_.size());
      if (n < 0 && n != LIBSSH2_ERROR_EAGAIN) return false;
      if (n > 0) to_channel_.erase(0, static_cast<std::size_t>(n)), moved = true;
    }
    return true;
  }

  void run() {
    for (;;) {
      bool moved = false;
      if (!pump(moved)) break;
      if (moved) continue;
      short local_events = to_channel_.empty() ? POLLIN : 0;
      if (!to_local_.empty()) local_events |= POLLOUT;
      pollfd fds[3] = {{jump_->fd.get(), jump_->events(), 0},
                       {local_.get(), local_events, 0},
                       {wake_r_.get(), POLLIN, 0}};
      if (::poll(fds, 3, 1000) < 0 && errno != EINTR) break;
      if (fds[2].revents != 0) break;
    }
    // The target's session sees its connection end.
    ::shutdown(local_.get(), SHUT_RDWR);
  }

  std::shared_ptr<Core> jump_;
  LIBSSH2_CHANNEL* channel_;
  UniqueFd local_;
  UniqueFd wake_r_, wake_w_;
  std::string to_local_, to_channel_;
  std::thread thread_;
};

// Opens the stream to `t` through its jump host; returns the target side's descriptor and
// fills `tunnel`, `address` ("host:port via jump") and `local` (this machine's address
// toward the jump host).
UniqueFd connect_through(Libssh2Connector& connector, const Target& t, Deadline deadline,
                         std::shared_ptr<void>& tunnel, std::string& address, std::string& local) {
  std::unique_ptr<Session> outer;
  try {
    outer = connector.connect(*t.jump, deadline);
  } catch (const ConnectError& e) {
    // The verdict is the jump host's; the table's row is the target's.
    throw ConnectError(e.verdict(), "jump host " + t.jump->alias + ": " + e.detail(), e.fix(),
                       e.address().empty() ? "" : e.address() + " (jump host)");
  }
  auto* jumped = static_cast<Libssh2Session*>(outer.get());
  std::shared_ptr<Core> jump = jumped->core();
  local = jumped->local_address();
  address = t.hostname + ":" + std::to_string(t.port) + " via " + t.jump->alias;
  LIBSSH2_CHANNEL* channel = nullptr;
  for (;;) {
    channel =
        libssh2_channel_direct_tcpip_ex(jump->session, t.hostname.c_str(), t.port, "127.0.0.1", 22);
    if (channel != nullptr) break;
    if (libssh2_session_last_errno(jump->session) != LIBSSH2_ERROR_EAGAIN) {
      throw ConnectError(Verdict::refused,
                         "the jump host " + t.jump->alias + " could not connect to " + t.hostname +
                             ":" + std::to_string(t.port) + ": " + jump->last_error(),
                         "check that " + t.jump->alias +
                             " reaches the host and allows TCP "
                             "forwarding (AllowTcpForwarding in its sshd_config)",
                         address);
    }
    if (!jump->wait(deadline)) {
      throw ConnectError(Verdict::timeout,
                         "the jump host " + t.jump->alias + " did not open a channel to " +
                             t.hostname + ":" + std::to_string(t.port) + " in time",
                         "is the host up? raise --start-timeout", address);
    }
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    libssh2_channel_free(channel);
    throw_errno("ProxyJump " + t.jump->alias + ": socketpair", "socketpair");
  }
  UniqueFd mine(pair[0]);
  tunnel = std::make_shared<Tunnel>(std::move(jump), channel, UniqueFd(pair[1]));
  return mine;
}

// --- host keys --------------------------------------------------------------------------

// libssh2's host key algorithms, with the types known_hosts already has for this host
// first, so a host known by its ECDSA key is not asked for its Ed25519 one. Only names
// this libssh2 supports are passed: 1.10 corrupts its list when it has to drop one.
std::string hostkey_preference(LIBSSH2_SESSION* session, const std::vector<std::string>& known) {
  std::vector<std::string> all = {"ssh-ed25519",
                                  "ecdsa-sha2-nistp256",
                                  "ecdsa-sha2-nistp384",
                                  "ecdsa-sha2-nistp521",
                                  "rsa-sha2-512",
                                  "rsa-sha2-256",
                                  "ssh-rsa"};
  const char** algs = nullptr;
  int n = libssh2_session_supported_algs(session, LIBSSH2_METHOD_HOSTKEY, &algs);
  if (n <= 0) return {};
  std::vector<std::string> supported(algs, algs + n);
  libssh2_free(session, static_cast<void*>(algs));
  auto usable = [&](const std::string& a) {
    return std::find(supported.begin(), supported.end(), a) != supported.end();
  };
  std::vector<std::string> order;
  auto add = [&](const std::string& a) {
    if (usable(a) && std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
  };
  for (const auto& k : known) {
    if (k == "ssh-rsa") {
      for (const char* r : {"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"}) add(r);
    } else if (std::find(all.begin(), all.end(), k) != all.end()) {
      add(k);
    }
  }
  for (const auto& a : all) add(a);
  std::string out;
  for (const auto& o : order) out += (out.empty() ? "" : ",") + o;
  return out;
}

// Returns a note for the report when a new key was recorded.
std::string check_host_key(const Target& t, Core& core, const std::string& address) {
  std::size_t len = 0;
  int type = 0;
  const char* key = libssh2_session_hostkey(core.session, &len, &type);
  if (key == nullptr) throw ConnectError(Verdict::not_ssh, "the server sent no host key");
  std::string_view blob(key, len);
  const std::string name = known_hosts_name(t.hostname, t.port);
  const std::string fp = key_type_of_blob(blob) + " " + fingerprint_sha256(blob);
  auto fail = [&](Verdict v, std::string detail, std::string fix) {
    return ConnectError(v, std::move(detail), std::move(fix), address);
  };
  HostKeyCheck check = check_known_host(t.known_hosts_file, t.hostname, t.port, blob);
  const std::string where = t.known_hosts_file + ":" + std::to_string(check.line);
  const std::string remove = "ssh-keygen -R '" + name + "' -f " + t.known_hosts_file;
  switch (check.status) {
    case HostKeyStatus::match:
      return {};
    case HostKeyStatus::mismatch:
      throw fail(
          Verdict::host_key_changed,
          "host key " + fp + " differs from the one recorded in " + where +
              " (the host was reinstalled, or someone is intercepting the connection)",
          "if the change is expected, remove the old key with `" + remove + "` and run again");
    case HostKeyStatus::revoked:
      throw fail(Verdict::host_key_changed, "host key " + fp + " is marked @revoked in " + where,
                 "give the host a new key, or fix " + where);
    case HostKeyStatus::not_found:
      break;
  }
  if (t.strict == StrictHostKeyChecking::yes) {
    throw fail(
        Verdict::host_key_unknown,
        "host key " + fp + " is not in " + t.known_hosts_file + " and StrictHostKeyChecking is yes",
        "verify the key and record it: `ssh -p " + std::to_string(t.port) + " " + t.user + "@" +
            t.hostname + " true` once, or set StrictHostKeyChecking accept-new for this host");
  }
  try {
    append_known_host(t.known_hosts_file, t.hostname, t.port, blob);
    spdlog::info("ssh {}: added host key {} for {} to {}", t.alias, fp, name, t.known_hosts_file);
    return "new host key " + fp + " recorded in " + t.known_hosts_file;
  } catch (const SystemError& e) {
    spdlog::warn("ssh {}: accepted new host key {} but could not record it: {}", t.alias, fp,
                 e.what());
    return "new host key " + fp + " accepted but not recorded: " + e.what();
  }
}

// --- authentication ---------------------------------------------------------------------

std::string read_prefix(const std::string& path, std::size_t max, bool& readable) {
  std::ifstream in(path, std::ios::binary);
  readable = static_cast<bool>(in);
  if (!in) return {};
  std::string data(max, '\0');
  in.read(data.data(), static_cast<std::streamsize>(max));
  data.resize(static_cast<std::size_t>(in.gcount()));
  return data;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

[[noreturn]] void auth_timed_out(const std::string& address) {
  throw ConnectError(Verdict::timeout,
                     "authentication did not finish before the deadline (--start-timeout)",
                     "check the load on the host; raise --start-timeout", address);
}

// What the key-based login tried, for the message when nothing was accepted.
struct AuthAttempts {
  std::vector<std::string> tried;
  std::string encrypted_key;  // the first passphrase-protected key file
  std::string first_key;      // the first key file that exists
  bool disconnected = false;  // the server hung up (MaxAuthTries): stop trying
};

// Public blobs of the key files (from their .pub), for IdentitiesOnly.
std::vector<std::string> public_blobs(const std::vector<std::string>& identity_files) {
  std::vector<std::string> wanted;
  for (const auto& f : identity_files) {
    bool readable = false;
    std::istringstream pub(read_prefix(f + ".pub", 16 * 1024, readable));
    std::string type, b64, blob;
    if (readable && pub >> type >> b64 && base64_decode(b64, blob)) wanted.push_back(blob);
  }
  return wanted;
}

// The agent's keys, one after another; true once one is accepted.
bool try_agent_keys(const Target& t, Core& core, Deadline deadline, const std::string& address,
                    AuthAttempts& a) {
  if (t.agent_socket.empty()) return false;
  LIBSSH2_AGENT* agent = libssh2_agent_init(core.session);
  if (agent == nullptr) return false;
  bool accepted = false;
  libssh2_agent_set_identity_path(agent, t.agent_socket.c_str());
  if (libssh2_agent_connect(agent) == 0 && libssh2_agent_list_identities(agent) == 0) {
    libssh2_agent_publickey* identity = nullptr;
    libssh2_agent_publickey* prev = nullptr;
    const std::vector<std::string> wanted =
        t.identities_only ? public_blobs(t.identity_files) : std::vector<std::string>{};
    while (!accepted && libssh2_agent_get_identity(agent, &identity, prev) == 0) {
      prev = identity;
      if (t.identities_only && std::find(wanted.begin(), wanted.end(),
                                         std::string(reinterpret_cast<const char*>(identity->blob),
                                                     identity->blob_len)) == wanted.end()) {
        continue;
      }
      int rc = core.call(deadline,
                         [&] { return libssh2_agent_userauth(agent, t.user.c_str(), identity); });
      if (rc == 0) {
        accepted = true;
        break;
      }
      if (rc == LIBSSH2_ERROR_TIMEOUT) {
        libssh2_agent_disconnect(agent);
        libssh2_agent_free(agent);
        auth_timed_out(address);
      }
      a.tried.push_back("agent key '" + std::string(identity->comment ? identity->comment : "") +
                        "'");
      if (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV) {
        a.disconnected = true;
        break;
      }
    }
  } else {
    a.tried.push_back("ssh-agent at " + t.agent_socket + " (cannot connect or list keys)");
  }
  libssh2_agent_disconnect(agent);
  libssh2_agent_free(agent);
  return accepted;
}

// The key files: -i and IdentityFile first, then the default ones; true once one is
// accepted.
bool try_key_files(const Target& t, Core& core, Deadline deadline, const std::string& address,
                   AuthAttempts& a) {
  std::vector<std::pair<std::string, bool>> files;  // path, explicitly named
  for (const auto& f : t.identity_files) files.emplace_back(f, true);
  for (const auto& f : t.default_identity_files) files.emplace_back(f, false);
  for (const auto& file : files) {
    // Named references, not a structured binding: the lambda below captures the path.
    const std::string& path = file.first;
    const bool explicit_key = file.second;
    if (a.disconnected) break;
    if (!file_exists(path)) {
      if (explicit_key) a.tried.push_back(path + " (missing)");
      continue;
    }
    if (a.first_key.empty()) a.first_key = path;
    bool readable = true;
    if (key_is_encrypted(path, readable)) {
      a.tried.push_back(path + " (passphrase-protected)");
      if (a.encrypted_key.empty()) a.encrypted_key = path;
      continue;
    }
    if (!readable) {
      a.tried.push_back(path + " (unreadable)");
      continue;
    }
    int rc = core.call(deadline, [&] {
      return libssh2_userauth_publickey_fromfile_ex(core.session, t.user.c_str(),
                                                    static_cast<unsigned>(t.user.size()), nullptr,
                                                    path.c_str(), nullptr);
    });
    if (rc == 0) return true;
    if (rc == LIBSSH2_ERROR_TIMEOUT) auth_timed_out(address);
    if (rc == LIBSSH2_ERROR_FILE) {
      a.tried.push_back(path + " (cannot load: " + core.last_error() + ")");
    } else if (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV ||
               rc == LIBSSH2_ERROR_SOCKET_SEND) {
      a.tried.push_back(path +
                        " (server closed the connection: too many keys tried? see MaxAuthTries)");
      a.disconnected = true;
    } else {
      a.tried.push_back(path + " (not accepted)");
    }
  }
  return false;
}

// Every key tried and refused: say which, and how to authorise one.
[[noreturn]] void no_key_accepted(const Target& t, const AuthAttempts& a,
                                  const std::string& address) {
  const std::string who = t.user + "@" + t.hostname;
  std::string list;
  for (const auto& k : a.tried) list += (list.empty() ? "" : ", ") + k;
  if (list.empty())
    list = "no keys: no agent, no -i, no IdentityFile, no ~/.ssh/id_ed25519, id_ecdsa or id_rsa";
  std::string detail = "no key accepted for " + who + "; tried: " + list;
  // The key to authorise: the first one that exists, else the first one asked for.
  std::string key = a.first_key;
  if (key.empty()) key = t.identity_files.empty() ? "~/.ssh/id_ed25519" : t.identity_files.front();
  std::string fix = "ssh-copy-id -i " + key + " -p " + std::to_string(t.port) + " " + who;
  if (a.first_key.empty()) fix = "ssh-keygen -t ed25519 -f " + key + ", then " + fix;
  if (!a.encrypted_key.empty() && t.agent_socket.empty()) {
    detail = a.encrypted_key +
             " is passphrase-protected and no ssh-agent is running (SSH_AUTH_SOCK unset); " +
             detail;
    fix = "eval \"$(ssh-agent)\" && ssh-add " + a.encrypted_key + "; or authorise a key: " + fix;
  }
  throw ConnectError(Verdict::auth, detail, fix, address);
}

void authenticate(const Target& t, Core& core, Deadline deadline, const std::string& address) {
  // userauth_list both asks which methods are allowed and tries "none".
  char* methods = nullptr;
  for (;;) {
    methods =
        libssh2_userauth_list(core.session, t.user.c_str(), static_cast<unsigned>(t.user.size()));
    if (methods != nullptr || libssh2_userauth_authenticated(core.session)) break;
    if (libssh2_session_last_errno(core.session) != LIBSSH2_ERROR_EAGAIN) {
      throw ConnectError(Verdict::auth, "the server ended the login: " + core.last_error(),
                         "check sshd's log on the host (MaxStartups, AllowUsers)", address);
    }
    if (!core.wait(deadline)) auth_timed_out(address);
  }
  if (libssh2_userauth_authenticated(core.session)) return;
  if (std::strstr(methods, "publickey") == nullptr) {
    throw ConnectError(Verdict::auth,
                       "the server accepts only '" + std::string(methods) + "' for " + t.user +
                           "@" + t.hostname + "; hvdrun logs in with keys only",
                       "enable PubkeyAuthentication in the host's sshd_config", address);
  }
  AuthAttempts attempts;
  if (try_agent_keys(t, core, deadline, address, attempts)) return;
  if (try_key_files(t, core, deadline, address, attempts)) return;
  no_key_accepted(t, attempts, address);
}

}  // namespace

bool key_is_encrypted(const std::string& path, bool& readable) {
  std::string text = read_prefix(path, 64 * 1024, readable);
  if (!readable) return false;
  if (text.find("Proc-Type: 4,ENCRYPTED") != std::string::npos) return true;
  if (text.find("BEGIN ENCRYPTED PRIVATE KEY") != std::string::npos) return true;
  constexpr std::string_view kBegin = "-----BEGIN OPENSSH PRIVATE KEY-----";
  auto begin = text.find(kBegin);
  if (begin == std::string::npos) return false;
  auto end = text.find("-----END", begin + kBegin.size());
  std::string b64;
  for (std::size_t i = begin + kBegin.size(); i < std::min(end, text.size()); ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) b64 += text[i];
  }
  std::string raw;
  if (!base64_decode(b64, raw)) return false;
  constexpr std::string_view kMagic("openssh-key-v1\0", 15);
  if (raw.compare(0, kMagic.size(), kMagic) != 0 || raw.size() < kMagic.size() + 4) return false;
  std::string cipher = key_type_of_blob(std::string_view(raw).substr(kMagic.size()));
  return !cipher.empty() && cipher != "none";
}

std::unique_ptr<Session> Libssh2Connector::connect(const Target& t, Deadline deadline) {
  if (!t.proxy.empty()) {
    // Connecting directly instead would fail later as dns or timeout, with no hint why.
    const std::string keyword = t.proxy.substr(0, t.proxy.find(' '));
    throw ConnectError(
        Verdict::unsupported,
        keyword + " is not supported (ssh_config has '" + t.proxy + "' for " + t.alias + ")",
        "run hvdrun on a machine that reaches the host directly (a login node or "
        "the bastion itself): its ranks must also reach hvdrun's rendezvous port",
        t.hostname + ":" + std::to_string(t.port));
  }
  global_init();
  const auto start = Clock::now();
  auto ms = [&start] {
    return std::chrono::duration_cast<milliseconds>(Clock::now() - start).count();
  };
  const Deadline connect_deadline = std::min(deadline, Clock::now() + t.connect_timeout);
  std::string address;
  std::string jump_local;
  std::shared_ptr<void> tunnel;
  UniqueFd fd;
  if (t.jump) {
    fd = connect_through(*this, t, connect_deadline, tunnel, address, jump_local);
  } else {
    fd = connect_any(t, resolve(t, connect_deadline), connect_deadline, address);
  }
  spdlog::debug("ssh {}: TCP connected to {} after {} ms", t.alias, address, ms());
  expect_banner(t, fd.get(), address, connect_deadline);
  spdlog::debug("ssh {}: banner after {} ms", t.alias, ms());

  auto core = std::make_shared<Core>();
  core->label = "ssh " + t.alias + " (" + address + ")";
  core->session = libssh2_session_init();
  if (core->session == nullptr) throw LaunchError(core->label + ": libssh2_session_init failed");
  core->fd = std::move(fd);
  core->tunnel = std::move(tunnel);
  libssh2_session_set_blocking(core->session, 0);
  const std::string hostkeys =
      hostkey_preference(core->session, known_key_types(t.known_hosts_file, t.hostname, t.port));
  if (!hostkeys.empty()) {
    libssh2_session_method_pref(core->session, LIBSSH2_METHOD_HOSTKEY, hostkeys.c_str());
  }

  int rc = core->call(deadline,
                      [&] { return libssh2_session_handshake(core->session, core->fd.get()); });
  if (rc != 0) {
    if (rc == LIBSSH2_ERROR_TIMEOUT) {
      throw ConnectError(Verdict::timeout, "SSH key exchange did not finish before the deadline",
                         "check the load on the host; raise --start-timeout", address);
    }
    throw ConnectError(Verdict::not_ssh, "SSH handshake failed: " + core->last_error(),
                       "check that the server speaks SSH-2 with algorithms libssh2 supports",
                       address);
  }
  spdlog::debug("ssh {}: key exchange done after {} ms", t.alias, ms());
  std::string note = check_host_key(t, *core, address);
  authenticate(t, *core, deadline, address);
  spdlog::debug("ssh {}: logged in as {} after {} ms", t.alias, t.user, ms());
  auto session = std::make_unique<Libssh2Session>(std::move(core), t);
  if (t.jump) session->set_jumped(jump_local, address, t.hostname);
  session->set_note(std::move(note));
  return session;
}

}  // namespace hvdrun::ssh
