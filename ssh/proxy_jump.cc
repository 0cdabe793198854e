// ProxyJump through one jump host: log in to it, open a direct-tcpip channel to the target,
// and copy between that channel and one end of a socketpair on a thread of its own; the
// target's session speaks SSH over the other end.
#include "ssh/proxy_jump.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <tuple>

#include "ssh/libssh2_core.h"

namespace hvdrun::ssh {
namespace {

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

}  // namespace

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
  std::shared_ptr<Core> jump = core_of(*outer);
  local = outer->local_address();
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

}  // namespace hvdrun::ssh
