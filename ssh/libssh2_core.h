// The libssh2 session core that the pieces of the libssh2 side share (session and channels,
// the ProxyJump tunnel, the host-key check, authentication): the session handle, its
// socket, and the poll-and-retry under a deadline that every non-blocking libssh2 call
// goes through. Internal to ssh/.
#pragma once

#include <libssh2.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "common/fd.h"
#include "ssh/session.h"

namespace hvdrun::ssh {

/// "ip" or "ip:port" ("[ip]:port" for IPv6) of a socket address; "?" for other families.
std::string format_address(const sockaddr* sa, bool with_port);

/// Owns the libssh2 session and its socket; shared by the Session and its Channels so a
/// channel never outlives the connection it runs on.
struct Core {
  /// ProxyJump: the Tunnel carrying `fd`; outlives the session.
  std::shared_ptr<void> tunnel;
  /// The session, in non-blocking mode.
  LIBSSH2_SESSION* session = nullptr;
  /// Its socket (one end of a socketpair behind a ProxyJump).
  UniqueFd fd;
  /// For messages: "ssh node1 (127.0.0.2:22022)".
  std::string label;
  /// The keepalive interval last configured, -1 before the first.
  int keepalive_interval = -1;

  Core() = default;
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core();

  /// libssh2's last error on this session, as text.
  std::string last_error() const;

  /// The poll() events libssh2 waits for: POLLIN, plus POLLOUT when it is blocked sending.
  short events() const;

  /// Waits for the socket per libssh2's block directions; false once the deadline passed.
  bool wait(Deadline deadline) const;

  /// Retries an int-returning libssh2 call until it stops saying EAGAIN or the deadline
  /// passes (then LIBSSH2_ERROR_TIMEOUT).
  template <typename F>
  int call(Deadline deadline, F f) const {
    for (;;) {
      int rc = f();
      if (rc != LIBSSH2_ERROR_EAGAIN) return rc;
      if (!wait(deadline)) return LIBSSH2_ERROR_TIMEOUT;
    }
  }
};

/// The core of a session that Libssh2Connector opened (ProxyJump runs its tunnel on it).
std::shared_ptr<Core> core_of(Session& session);

}  // namespace hvdrun::ssh
