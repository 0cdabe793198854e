// The agent link of a remote host: `hvdrun agent` run through one SSH exec channel on the
// session the preflight opened (one login per host per job), and the entry point that runs
// a job with remote hosts: preflight every host, then start the job with these links.
#pragma once

#include <memory>
#include <string>

#include "launcher/agent_link.h"
#include "launcher/options.h"
#include "ssh/session.h"

namespace hvdrun::launcher {

/// Starts `shell_quote(remote_hvdrun) agent` on `session` (host `host`, as written in -H),
/// waiting for the channel until `deadline`, and links to it. The agent's own stderr is
/// relayed to hvdrun's stderr, each line prefixed "hvdrun: host HOST: ", and its last lines
/// are quoted when the agent ends. Throws ssh::SessionError naming the host.
std::unique_ptr<AgentLink> start_ssh_agent(const std::string& host,
                                           std::unique_ptr<ssh::Session> session,
                                           const std::string& remote_hvdrun,
                                           ssh::Deadline deadline);

/// Runs the job like run_job(), reaching hosts that are not this machine over SSH: first
/// the preflight (every remote host in parallel, under --start-timeout); if any host fails
/// it, prints the preflight table to stderr and returns 255 without starting anything;
/// otherwise every remote host's agent runs on the session its preflight opened. A job on
/// local hosts only is run_job() unchanged. Throws like run_job().
int run_job_over_ssh(const LaunchOptions& requested);

}  // namespace hvdrun::launcher
