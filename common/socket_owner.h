// Who is at the other end of a TCP connection, when that end is on this host: the kernel
// knows the uid owning the peer's socket, found by its address and port (sock_diag, or
// /proc/net/tcp and tcp6 where sock_diag is missing). A server without a secret in its
// protocol (Horovod's HTTP rendezvous) uses it to serve only the job's own user.
#pragma once

#include <sys/types.h>

#include <optional>

namespace hvdrun {

/// The uid owning the socket at the other end of the connected TCP socket `fd`, when
/// that socket is on this host (in this network namespace); nullopt when it is not (a
/// remote peer) or is gone already. Does not throw.
std::optional<uid_t> local_peer_uid(int fd) noexcept;

}  // namespace hvdrun
