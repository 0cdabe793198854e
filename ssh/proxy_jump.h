// ProxyJump: the target's SSH session runs over a stream that a direct-tcpip channel of
// the jump host's session carries. Internal to ssh/.
#pragma once

#include <memory>
#include <string>

#include "common/fd.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::ssh {

/// Logs in to `t.jump` with `connector` and opens the stream to `t` through it; returns
/// the target side's descriptor and fills `tunnel` (what carries the stream; keep it as
/// long as the descriptor), `address` ("host:port via jump") and `local` (this machine's
/// address toward the jump host). Throws ConnectError, the jump host's failures named so.
UniqueFd connect_through(Libssh2Connector& connector, const Target& t, Deadline deadline,
                         std::shared_ptr<void>& tunnel, std::string& address, std::string& local);

}  // namespace hvdrun::ssh
