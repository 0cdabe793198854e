// An agent behind a user's command (docker exec, kubectl exec, a script), over the
// command's stdin/stdout: started and version-checked here, then linked as a pipe agent
// (agent_link.h) whose teardown reaches the command's whole process group.
#include "launcher/hosts/exec_agent_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/deadline.h"
#include "common/error.h"
#include "launcher/hosts/agent_link.h"
#include "launcher/hosts/preflight.h"
#include "launcher/plan/launch_method.h"
#include "launcher/plan/local_host.h"
#include "launcher/process/subprocess.h"
#include "ssh/session.h"

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// This machine's address on the route toward `ip`; 127.0.0.1 when `ip` is not an IPv4
// address or there is no route to it.
std::string source_address_toward(const std::string& ip) {
  in_addr v4{};
  if (::inet_pton(AF_INET, ip.c_str(), &v4) != 1) return "127.0.0.1";
  try {
    return local_address_toward(ip);
  } catch (const SystemError&) {
    return "127.0.0.1";
  }
}

std::string first_line(std::string_view text) {
  std::string line(text.substr(0, text.find('\n')));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace

std::vector<std::string> exec_agent_command(const std::string& remote_hvdrun) {
  const std::string q = ssh::shell_quote(remote_hvdrun);
  return {"sh", "-c", q + " --version && echo " + kAgentMarker + " && exec " + q + " agent"};
}

PendingExecAgent::PendingExecAgent(const std::string& host,
                                   const std::vector<std::string>& exec_argv,
                                   const std::string& remote_hvdrun)
    : host_(host), remote_hvdrun_(remote_hvdrun) {
  LauncherChoice shown{LauncherChoice::exec, exec_argv};
  command_text_ = to_string(shown);
  auto [to_r, to_w] = make_pipe();
  auto [from_r, from_w] = make_pipe();
  ChildSpec spec;
  spec.what = "the exec: command for host " + host;
  spec.argv = exec_command_for(exec_argv, host, exec_agent_command(remote_hvdrun));
  spec.stdin_fd = to_r.get();
  spec.stdout_fd = from_w.get();
  spec.death_signal = SIGTERM;
  Child child = spawn(spec);
  pid_ = child.pid;
  if (auto failure = read_exec_failure(child.exec_status.get())) {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    throw LaunchError("host " + host + ": cannot run '" + spec.argv.front() + "' of --launcher " +
                      command_text_ + ": " + std::strerror(failure->error) +
                      "; check that the command is installed and on PATH");
  }
  to_ = std::move(to_w);
  from_ = std::move(from_r);
  set_nonblocking(from_.get());
}

PendingExecAgent::~PendingExecAgent() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::unique_ptr<AgentLink> PendingExecAgent::finish(const std::string& expected_version,
                                                    Clock::time_point deadline,
                                                    const std::string& address) {
  while (!receive()) {
    const int left = poll_ms_left(deadline);
    if (left == 0) break;
    pollfd p{from_.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno != EINTR) throw_errno("waiting for host " + host_, "poll");
  }
  return link(expected_version, address);
}

bool PendingExecAgent::receive() {
  const std::string marker = std::string(kAgentMarker) + "\n";
  for (;;) {
    if (ended_ || got_.size() > 64 * 1024) return true;
    // The marker is searched for where it can start in what just arrived, not from the top.
    const std::size_t from = got_.size() >= marker.size() ? got_.size() - marker.size() + 1 : 0;
    char buf[4096];
    const ssize_t n = ::read(from_.get(), buf, sizeof buf);
    if (n > 0) {
      got_.append(buf, static_cast<std::size_t>(n));
      if (got_.find(marker, from) != std::string::npos) return true;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    ended_ = true;
  }
}

std::unique_ptr<AgentLink> PendingExecAgent::link(const std::string& expected_version,
                                                  const std::string& address) {
  const std::string marker = std::string(kAgentMarker) + "\n";
  const std::string& got = got_;
  const bool ended = ended_;
  const auto at = got.find(marker);
  const std::string before = got.substr(0, at);
  bool version_ok = false;
  for (std::size_t pos = 0; pos < before.size() && !version_ok;) {
    auto end = before.find('\n', pos);
    version_ok = first_line(std::string_view(before).substr(pos)) == expected_version;
    pos = end == std::string::npos ? before.size() : end + 1;
  }
  const std::string where = "host " + host_ + " (--launcher " + command_text_ + "): ";
  if (at != std::string::npos && version_ok && at + marker.size() == got.size()) {
    set_nonblocking(to_.get());
    set_nonblocking(from_.get());
    // The command's process group is the unit of teardown.
    PipeLinkSpec link;
    link.pid = std::exchange(pid_, -1);
    link.to = std::move(to_);
    link.from = std::move(from_);
    link.what = "the exec: command";
    link.description = "exec: command pid " + std::to_string(link.pid) + " for host " + host_;
    link.whole_group = true;
    link.host_address = address.empty() ? host_ : address;
    link.launcher_address = source_address_toward(address);
    return make_pipe_agent_link(std::move(link));
  }
  if (at != std::string::npos && version_ok) {
    throw LaunchError(where + "the agent at " + remote_hvdrun_ + " spoke before it was asked");
  }
  if (at != std::string::npos) {
    throw LaunchError(where + "found '" + first_line(before) + "' at " + remote_hvdrun_ +
                      ", expected '" + expected_version + "'; install " + expected_version +
                      " at " + remote_hvdrun_ + " on " + host_ + ", or pass --remote-hvdrun PATH");
  }
  std::string how = "did not answer within --start-timeout";
  if (ended) {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    how = describe_exit(status);
  }
  throw LaunchError(
      where + "the command " + how + " before " + remote_hvdrun_ + " reported its version" +
      (before.empty() ? std::string() : " (it printed '" + first_line(before) + "')") +
      "; check that the command reaches the host and that " + remote_hvdrun_ +
      " runs there (its stderr is above)");
}

}  // namespace hvdrun::launcher
