// LocalAgentLink: the agent of a local host, run as a child of the launcher over pipes.
#include "launcher/agent_link.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "launcher/agent.h"
#include "launcher/subprocess.h"

#include <spdlog/spdlog.h>

namespace hvdrun::launcher {
namespace {

class LocalAgentLink : public AgentLink {
 public:
  LocalAgentLink(pid_t pid, UniqueFd to_agent, UniqueFd from_agent)
      : pid_(pid), to_(std::move(to_agent)), from_(std::move(from_agent)) {}

  ~LocalAgentLink() override {
    if (pid_ > 0) close(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }

  void add_pollfds(std::vector<pollfd>& fds, bool want_read, bool want_write) const override {
    if (want_read && from_) fds.push_back({from_.get(), POLLIN, 0});
    if (want_write && to_) fds.push_back({to_.get(), POLLOUT, 0});
  }

  IoResult read(char* buf, std::size_t size) override {
    if (!from_) return {IoResult::eof, 0, {}};
    for (;;) {
      ssize_t n = ::read(from_.get(), buf, size);
      if (n > 0) return {IoResult::ok, static_cast<std::size_t>(n), {}};
      if (n == 0) {
        from_.reset();
        return {IoResult::eof, 0, {}};
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0, std::string("read from agent: ") + std::strerror(errno)};
    }
  }

  IoResult write(const char* buf, std::size_t size) override {
    if (!to_) return {IoResult::error, 0, "write to agent: stream already closed"};
    for (;;) {
      ssize_t n = ::write(to_.get(), buf, size);
      if (n >= 0)
        return {n ? IoResult::ok : IoResult::would_block, static_cast<std::size_t>(n), {}};
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return {IoResult::would_block, 0, {}};
      return {IoResult::error, 0, std::string("write to agent: ") + std::strerror(errno)};
    }
  }

  void close_write() override { to_.reset(); }

  void abort() override {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }

  std::string close(std::chrono::steady_clock::time_point deadline) override {
    to_.reset();
    from_.reset();
    if (pid_ <= 0) return result_;
    // The agent is our child: wait for it with a short backoff up to the deadline.
    result_ = wait_or_kill(pid_, deadline);
    pid_ = -1;
    return result_;
  }

  std::string describe() const override { return "local agent pid " + std::to_string(pid_); }
  std::string launcher_address() const override { return "127.0.0.1"; }
  std::string host_address() const override { return "127.0.0.1"; }

 private:
  pid_t pid_;
  UniqueFd to_;
  UniqueFd from_;
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
  return std::make_unique<LocalAgentLink>(child.pid, std::move(to_agent_w),
                                          std::move(from_agent_r));
}

}  // namespace hvdrun::launcher
