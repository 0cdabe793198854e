// PreauthGate: one pre-authentication policy for every listening port (preauth_gate.h).
#include "common/preauth_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <utility>

#include "common/socket_owner.h"

namespace hvdrun {

std::string connection_source(int fd) {
  const PeerOwner owner = local_peer_owner(fd);
  if (owner.kind == PeerKind::local) return "uid " + std::to_string(owner.uid) + " on this host";
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, text, sizeof text);
  } else if (ss.ss_family == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) {
      ::inet_ntop(AF_INET, a6.s6_addr + 12, text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &a6, text, sizeof text);
    }
  } else {
    return "unknown peer";
  }
  return text;
}

PreauthGate::PreauthGate(std::string port, std::string pending_means, PreauthPolicy policy)
    : port_(std::move(port)),
      pending_means_(std::move(pending_means)),
      policy_(policy),
      log_(policy.log_interval),
      cap_(policy.limits) {}

PendingCap::Id PreauthGate::enter(const std::string& source, std::function<void()> close) {
  // The callback runs for an older connection: `source` there is that connection's.
  return cap_.add(source, [this, source, close = std::move(close)] {
    log_.warn("too many connections " + pending_means_,
              port_ + ": too many connections " + pending_means_ +
                  " (limits: " + std::to_string(policy_.limits.per_source) + " per source, " +
                  std::to_string(policy_.limits.total) + " in all); closing the oldest from " +
                  source + ". Something other than the job's own processes is connecting " +
                  "(docs/security.md)");
    if (close) close();
  });
}

void PreauthGate::leave(PendingCap::Id id) { cap_.remove(id); }

void PreauthGate::refuse(const std::string& cause, const std::string& message) {
  ++refused_;
  log_.warn(cause, message);
}

}  // namespace hvdrun
