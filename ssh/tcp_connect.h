// The TCP side of an SSH login, before libssh2 takes the socket: resolve the name under a
// deadline, connect to each of its addresses in turn, and check that what answers sends an
// SSH banner. Each failure is a ConnectError with its preflight verdict. Internal to ssh/.
#pragma once

#include <string>

#include "common/fd.h"
#include "ssh/session.h"

namespace hvdrun::ssh {

/// Resolves `t.hostname` (a numeric address at once, a name on a thread given up at the
/// deadline) and connects to its addresses in turn, each with its share of the time left.
/// Sets `connected` to the address reached ("ip:port"). Throws ConnectError (dns, timeout,
/// refused).
UniqueFd connect_direct(const Target& t, Deadline deadline, std::string& connected);

/// Waits for the server's first bytes on `fd` and checks they look like "SSH-". Throws
/// ConnectError (not_ssh, refused) naming `address`.
void expect_banner(const Target& t, int fd, const std::string& address, Deadline deadline);

}  // namespace hvdrun::ssh
