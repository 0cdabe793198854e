// The agent link of a host reached by `--launcher exec:COMMAND`: COMMAND (with `{host}`
// replaced) runs as a child of the launcher, hvdrun's agent command appended, and its
// stdin/stdout carry the agent's stream. COMMAND is anything that gives a shell on the host
// (`docker exec -i {host}`, `kubectl exec -i {host} --`): no SSH, no login preflight. The
// appended command prints the remote hvdrun's version first, which is checked as the SSH
// preflight checks it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "launcher/hosts/agent_link.h"

namespace hvdrun::launcher {

/// The shell command appended to an exec: command: prints `remote_hvdrun --version`, then
/// the marker line, then execs `remote_hvdrun agent`.
std::vector<std::string> exec_agent_command(const std::string& remote_hvdrun);

/// An exec: agent being started: the child runs; its version is not yet checked.
class PendingExecAgent {
 public:
  /// Starts `exec_argv` for `host` (own process group, SIGTERM when the launcher dies,
  /// stderr shared with the launcher). Throws SystemError when it cannot start.
  PendingExecAgent(const std::string& host, const std::vector<std::string>& exec_argv,
                   const std::string& remote_hvdrun);
  ~PendingExecAgent();
  PendingExecAgent(const PendingExecAgent&) = delete;
  PendingExecAgent& operator=(const PendingExecAgent&) = delete;

  /// Waits until `deadline` for the version and the marker, and returns the link (see
  /// link() for `address`). Throws LaunchError saying what the host printed, how the
  /// command ended and what to do.
  std::unique_ptr<AgentLink> finish(const std::string& expected_version,
                                    std::chrono::steady_clock::time_point deadline,
                                    const std::string& address = {});

  /// The descriptor to poll (POLLIN) while the answer is awaited.
  int fd() const { return from_.get(); }
  /// Reads what the command printed so far, without blocking; true once the answer is
  /// complete (the marker came, the command ended or printed too much): call link() then.
  bool receive();
  /// The link once receive() said so, or before (a deadline passed: "did not answer").
  /// `address` is the host's IPv4 address when its name was looked up and resolved
  /// (host_lookup.h): the launcher then offers its ranks its own address on the route
  /// there; empty: the host is reached by its name and the ranks reach the launcher at
  /// 127.0.0.1 (or through --network-interface). Throws LaunchError as finish() does.
  std::unique_ptr<AgentLink> link(const std::string& expected_version,
                                  const std::string& address = {});
  /// The host.
  const std::string& host() const { return host_; }

 private:
  std::string host_;
  std::string got_;
  bool ended_ = false;
  std::string command_text_;
  std::string remote_hvdrun_;
  pid_t pid_ = -1;
  UniqueFd to_;
  UniqueFd from_;
};

}  // namespace hvdrun::launcher
