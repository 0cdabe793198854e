// LocalAgentLink: the agent of a local host, run as a child of the launcher over pipes.
#include "launcher/agent_link.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "launcher/agent.h"

#include <spdlog/spdlog.h>

namespace hvdrun::launcher {
namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with status " + std::to_string(status);
}

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
      if (n >= 0) return {n ? IoResult::ok : IoResult::would_block, static_cast<std::size_t>(n), {}};
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
    // The agent is our child: poll its exit with a short backoff up to the deadline.
    auto delay = std::chrono::microseconds(200);
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        result_ = r == pid_ ? describe_status(status) : std::string();
        pid_ = -1;
        return result_;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        result_ = "did not exit in time and was killed";
        return result_;
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::microseconds(20000));
    }
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
  const char* argv[] = {"hvdrun", "agent", nullptr};
  pid_t parent = ::getpid();
  sigset_t empty;
  sigemptyset(&empty);
  pid_t pid = ::fork();
  if (pid < 0) throw_errno("starting the local agent " + exe, "fork");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::setpgid(0, 0);  // terminal signals go to the launcher alone
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(to_agent_r.get(), 0);
    ::dup2(from_agent_w.get(), 1);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::sigaction(s, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    if (in_process) {
      // Nothing of the launcher's may stay open here: another local agent's pipe end held
      // by this one would hide the launcher's death from it.
      ::close_range(3, ~0u, 0);
      spdlog::set_pattern("hvdrun agent: [%l] %v");
      int code = 1;
      try {
        code = run_agent(0, 1);
      } catch (...) {
      }
      std::fflush(stderr);
      ::_exit(code);  // no exit handlers or static destructors of the launcher's state
    }
    ::execv(exe.c_str(), const_cast<char* const*>(argv));
    const char msg[] = "hvdrun: cannot execute the agent binary\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  to_agent_r.reset();
  from_agent_w.reset();
  // Rank output flows through this pipe: a large one means fewer, bigger transfers.
  ::fcntl(from_agent_r.get(), F_SETPIPE_SZ, 1 << 20);
  set_nonblocking(to_agent_w.get());
  set_nonblocking(from_agent_r.get());
  return std::make_unique<LocalAgentLink>(pid, std::move(to_agent_w), std::move(from_agent_r));
}

}  // namespace hvdrun::launcher
