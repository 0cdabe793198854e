// Who is at the other end of a TCP connection, when that end is on this host: the kernel
// knows the uid owning the peer's socket, found by its address and port (sock_diag, or
// /proc/net/tcp and tcp6 where sock_diag is missing). A server without a secret in its
// protocol (Horovod's HTTP rendezvous) uses it to serve only the job's own user.
#pragma once

#include <sys/types.h>

#include <optional>

namespace hvdrun {

/// Where the other end of a connection is.
enum class PeerKind {
  local,    ///< on this host (in this network namespace): its owner's uid is known
  remote,   ///< on another host
  unknown,  ///< cannot be told now (out of descriptors, no /proc), or no connection
};

/// The other end of a connection, and its owner when it is local.
struct PeerOwner {
  PeerKind kind = PeerKind::unknown;  ///< where it is
  uid_t uid = 0;                      ///< its owner when local
};

/// Who is at the other end of the connected TCP socket `fd`. Does not throw.
PeerOwner local_peer_owner(int fd) noexcept;

/// The uid owning the socket at the other end of the connected TCP socket `fd`, when
/// that socket is on this host (in this network namespace); nullopt otherwise (a remote
/// peer, or one that cannot be told). Does not throw.
std::optional<uid_t> local_peer_uid(int fd) noexcept;

}  // namespace hvdrun
