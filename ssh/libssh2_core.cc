// The shared libssh2 session core: teardown that never waits, error text, and the
// poll-under-a-deadline that non-blocking libssh2 calls retry on.
#include "ssh/libssh2_core.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include "common/deadline.h"
#include "ssh/libssh2_errors.h"

namespace hvdrun::ssh {

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

Core::~Core() {
  if (session == nullptr) return;
  libssh2_session_disconnect(session, "hvdrun closing");  // one try: never wait here
  if (fd) ::shutdown(fd.get(), SHUT_RDWR);  // any pending channel close now fails fast
  for (int i = 0; i < 100 && libssh2_session_free(session) == LIBSSH2_ERROR_EAGAIN; ++i) {
  }
}

std::string Core::last_error() const {
  char* msg = nullptr;
  int len = 0;
  int rc = libssh2_session_last_error(session, &msg, &len, 0);
  return libssh2_error_text(rc, msg && len > 0
                                    ? std::string_view(msg, static_cast<std::size_t>(len))
                                    : std::string_view());
}

short Core::events() const {
  short ev = POLLIN;
  if (libssh2_session_block_directions(session) & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
  return ev;
}

bool Core::wait(Deadline deadline) const {
  auto left = ms_left(deadline);
  if (left <= 0) return false;
  pollfd pfd{fd.get(), events(), 0};
  int rc = ::poll(&pfd, 1, static_cast<int>(left));
  return rc != 0 || Clock::now() < deadline;
}

}  // namespace hvdrun::ssh
