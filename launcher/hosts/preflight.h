// The preflight: before anything starts, log in to every remote host in parallel, check
// that the expected hvdrun is there, and give each host a verdict with a fix. It lives with
// the launch, above ssh/, because it knows what a job needs from a host (hvdrun, its
// version, the agent); ssh/ only knows how to log in and run a command. The open
// sessions of the good hosts are handed back so the launcher reuses them for the agent
// channel: one SSH login per host per job.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher/plan/launch_options.h"
#include "launcher/plan/launch_plan.h"
#include "ssh/config.h"
#include "ssh/session.h"

namespace hvdrun::launcher {

using ssh::Verdict;

/// The verdict for one host.
struct HostCheck {
  /// The host as written in -H or the hostfile.
  std::string host;
  /// True for this machine (no SSH; always ok).
  bool local = false;
  /// "address:port" connected to (or the name:port when it never got that far).
  std::string address;
  /// The outcome.
  Verdict verdict = Verdict::ok;
  /// Time from the start of this host's check to its verdict.
  std::chrono::milliseconds latency{0};
  /// Of that, the login: from the start to an authenticated session.
  std::chrono::milliseconds login{0};
  /// And the remote command, for ok remote hosts: from the login to hvdrun's answer, the
  /// user's shell there (and its start-up files) starting `hvdrun --version`.
  std::chrono::milliseconds shell{0};
  /// What was found ("hvdrun 0.1.0 at /usr/bin/hvdrun", "connection refused", ...).
  std::string detail;
  /// What to do about a bad verdict; empty when ok.
  std::string fix;
  /// For ok remote hosts: the authenticated session, ready for the agent's channel.
  std::unique_ptr<ssh::Session> session;
  /// With PreflightSettings::start_agent, for ok remote hosts: the channel running
  /// `hvdrun agent`, which waits for the launcher's hello.
  std::unique_ptr<ssh::Channel> agent_channel;
  /// With PreflightSettings::read_topology, for ok remote hosts: what `hvdrun agent
  /// --topology` printed there (host_topologies.h reads it).
  std::string topology;
};

/// All hosts, in the order given.
struct PreflightReport {
  /// One entry per host of the plan, in its order.
  std::vector<HostCheck> hosts;
  /// Wall time of the whole preflight.
  std::chrono::milliseconds elapsed{0};
  /// True when every host is ok.
  bool ok() const;
  /// Number of hosts with a bad verdict.
  int failures() const;
  /// Moves the session of `host` out of the report (nullptr if none).
  std::unique_ptr<ssh::Session> take_session(const std::string& host);
};

/// Knobs of a preflight that do not come from LaunchOptions.
struct PreflightSettings {
  /// The first line `hvdrun --version` must print on every host.
  std::string expected_version;
  /// Path of hvdrun on the hosts; empty means LaunchOptions::remote_hvdrun, else this
  /// binary's own absolute path.
  std::string remote_hvdrun;
  /// Hosts checked at once; the rest queue.
  int max_parallel = 128;
  /// Start the agent in the same shell that prints the version
  /// (`hvdrun --version && echo MARKER && exec hvdrun agent`): a job then costs one remote
  /// shell per host, not two (start-up files in the shell can take a good part of a
  /// second). The agent's channel is handed back in HostCheck::agent_channel.
  bool start_agent = false;
  /// Run `hvdrun agent --topology` in the same shell after the version: each ok remote
  /// host's topology comes back in HostCheck::topology (`hvdrun check --topology`,
  /// `--dry-run` with a placement, `-H host:auto`). Not with start_agent.
  bool read_topology = false;
};

/// The line the topology probe's command prints between the version and the topology.
inline constexpr const char* kTopologyMarker = "hvdrun-topology-follows";

/// The line the preflight's command prints between the version and the agent's stream.
inline constexpr const char* kAgentMarker = "hvdrun-agent-starting";

/// A remote command slower than this after the login gets a note in the check's table: it
/// is the user's shell and its start-up files, which every launch pays.
inline constexpr std::chrono::milliseconds kSlowRemoteShell{250};

/// Checks every host of `plan` whose method is ssh (the others are reported ok without
/// SSH), with the SSH settings, --start-timeout and --remote-hvdrun of `options` and the
/// ssh_config `config`. Never throws for a bad host: each one gets its verdict
/// (UsageError only for a malformed ssh_config value).
PreflightReport preflight(const LaunchPlan& plan, const LaunchOptions& options,
                          const ssh::SshConfig& config, ssh::Connector& connector,
                          const PreflightSettings& settings);

/// The preflight of `hvdrun check`: every host of `options` (make_check_plan), with the
/// ssh_config named by options (UsageError when malformed).
PreflightReport preflight(const LaunchOptions& options, ssh::Connector& connector,
                          const PreflightSettings& settings);

/// Same with a given ssh_config (tests, callers that already loaded it).
PreflightReport preflight(const LaunchOptions& options, const ssh::SshConfig& config,
                          ssh::Connector& connector, const PreflightSettings& settings);

/// Absolute path of the running executable (/proc/self/exe).
std::string self_executable();

/// The path where hvdrun is expected on remote hosts for these options.
std::string expected_remote_hvdrun(const LaunchOptions& options, const PreflightSettings& settings);

/// The SSH part of `options`, for ssh::resolve_target.
ssh::SshOptions ssh_options(const LaunchOptions& options);

}  // namespace hvdrun::launcher
