// The agent link of a remote host: `hvdrun agent` run through one SSH exec channel on the
// session the preflight opened (one login per host per job).
#pragma once

#include <memory>
#include <string>

#include "launcher/hosts/agent_link.h"
#include "ssh/session.h"

namespace hvdrun::launcher {

/// Links to an agent already running on `channel` (started by the preflight in the shell
/// that reported its version), on `session` to host `host`.
std::unique_ptr<AgentLink> make_ssh_agent_link(const std::string& host,
                                               std::unique_ptr<ssh::Session> session,
                                               std::unique_ptr<ssh::Channel> channel);

}  // namespace hvdrun::launcher
