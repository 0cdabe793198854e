// Links to agents behind a child process over pipes (PipeAgentLink), and the local host's
// agent started as such a child.
#include "launcher/hosts/agent_link.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "launcher/agent/agent.h"
#include "launcher/process/subprocess.h"

#include <spdlog/spdlog.h>

namespace hvdrun::launcher {
namespace {

class PipeAgentLink : public AgentLink {
 public:
  explicit PipeAgentLink(PipeLinkSpec spec) : s_(std::move(spec)) {}

  ~PipeAgentLink() override {
    if (s_.pid > 0) close(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  PipeAgentLink(const PipeAgentLink&) = delete;
  PipeAgentLink& operator=(const PipeAgentLink&) = delete;

  void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const override {
    if (want_read && s_.from) fds.push_back({s_.from.get(), POLLIN, 0});
    if (want_write && s_.to) fds.push_back({s_.to.get(), POLLOUT, 0});
  }

  IoResult read(char* buf, std::size_t size) override {
    if (!s_.from) return {IoResult::eof, 0, {}};
    for (;;) {
      ssize_t n = ::read(s_.from.get(), buf, size);
      if (n > 0) return {IoResult::ok, static_cast<std::size_t>(n), {}};
      if (n == 0) {
        s_.from.reset();
        return {IoResult::eof, 0, {}};
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0, "read from " + s_.what + ": " + std::strerror(errno)};
    }
  }

  IoResult write(const char* buf, std::size_t size) override {
    if (!s_.to) return {IoResult::error, 0, "write to " + s_.what + ": stream already closed"};
    for (;;) {
      ssize_t n = ::write(s_.to.get(), buf, size);
      if (n >= 0)
        return {n ? IoResult::ok : IoResult::would_block, static_cast<std::size_t>(n), {}};
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0, "write to " + s_.what + ": " + std::strerror(errno)};
    }
  }

  void close_write() override { s_.to.reset(); }

  void abort() override {
    if (s_.pid > 0) ::kill(s_.whole_group ? -s_.pid : s_.pid, SIGKILL);
  }

  std::string close(std::chrono::steady_clock::time_point deadline) override {
    s_.to.reset();
    s_.from.reset();
    if (s_.pid <= 0) return result_;
    // The child ends when the agent does (its stdin saw EOF): wait for it with a short
    // backoff up to the deadline; with whole_group, whatever of its group is left goes too.
    result_ = wait_or_kill(s_.pid, deadline);
    if (s_.whole_group) ::kill(-s_.pid, SIGKILL);
    s_.pid = -1;
    return result_;
  }

  std::string describe() const override { return s_.description; }
  std::string launcher_address() const override { return s_.launcher_address; }
  std::string host_address() const override { return s_.host_address; }

 private:
  PipeLinkSpec s_;
  std::string result_;
};

// True when this process has one thread: only then may a forked child go on running
// ordinary code (another thread could hold a lock, malloc's included, at the fork).
bool single_threaded() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return false;
  char line[256];
  int threads = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "Threads:", 8) == 0) {
      threads = static_cast<int>(std::strtol(line + 8, nullptr, 10));
      break;
    }
  }
  std::fclose(f);
  return threads == 1;
}

}  // namespace

std::unique_ptr<AgentLink> make_pipe_agent_link(PipeLinkSpec spec) {
  return std::make_unique<PipeAgentLink>(std::move(spec));
}

std::unique_ptr<AgentLink> start_local_agent(const std::string& exe_arg) {
  const bool in_process = exe_arg.empty() && single_threaded();
  const std::string exe = exe_arg.empty() ? "/proc/self/exe" : exe_arg;
  auto [to_agent_r, to_agent_w] = make_pipe();
  auto [from_agent_r, from_agent_w] = make_pipe();
  ChildSpec spec;
  spec.what = "the local agent " + exe;
  spec.stdin_fd = to_agent_r.get();
  spec.stdout_fd = from_agent_w.get();
  spec.death_signal = SIGTERM;  // terminal signals go to the launcher alone (own group)
  if (in_process) {
    spec.main = [] {
      // Nothing of the launcher's may stay open here: another local agent's pipe end held
      // by this one would hide the launcher's death from it.
      ::close_range(3, ~0U, 0);
      spdlog::set_pattern("hvdrun agent: [%l] %v");
      int code = 1;
      try {
        code = run_agent(0, 1);
      } catch (...) {
      }
      std::fflush(stderr);
      return code;
    };
  } else {
    spec.argv = {"hvdrun", "agent"};
    spec.path = exe;
  }
  Child child = spawn(spec);
  if (child.exec_status) {
    if (auto failure = read_exec_failure(child.exec_status.get())) {
      ::waitpid(child.pid, nullptr, 0);
      throw SystemError("hvdrun: cannot execute the agent binary " + exe, "execv", failure->error);
    }
  }
  to_agent_r.reset();
  from_agent_w.reset();
  // Rank output flows through this pipe: a large one means fewer, bigger transfers.
  ::fcntl(from_agent_r.get(), F_SETPIPE_SZ, 1 << 20);
  set_nonblocking(to_agent_w.get());
  set_nonblocking(from_agent_r.get());
  PipeLinkSpec link;
  link.pid = child.pid;
  link.to = std::move(to_agent_w);
  link.from = std::move(from_agent_r);
  link.what = "agent";
  link.description = "local agent pid " + std::to_string(child.pid);
  return make_pipe_agent_link(std::move(link));
}

}  // namespace hvdrun::launcher
