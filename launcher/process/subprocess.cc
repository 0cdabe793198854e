// spawn(), exit descriptions and SignalMask. In the child only async-signal-safe calls run
// before exec: everything it needs (argv, envp) is built before the fork.
#include "launcher/process/subprocess.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <tuple>
#include <utility>

#include "common/deadline.h"
#include "common/error.h"
#include "common/fd_limit.h"

extern char** environ;

// Sanitizers' run-time libraries make their locks safe for fork() alone (fork_into_cgroup).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HVDRUN_FORK_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HVDRUN_FORK_ONLY 1
#endif
#endif

namespace hvdrun::launcher {
namespace {

// Arrivals per signal number, and the latest one, written by the handler.
std::array<volatile sig_atomic_t, NSIG> g_arrivals{};
volatile sig_atomic_t g_last = 0;

void on_signal(int sig) {
  if (sig > 0 && sig < NSIG) {
    auto& n = g_arrivals[static_cast<std::size_t>(sig)];
    n = n + 1;
  }
  g_last = sig;
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// A CPU set and a NUMA node mask, made before the fork so that the child only makes the
// system calls.
struct Binding {
  bool cpus = false;
  cpu_set_t cpu_set{};
  static constexpr std::size_t kMaskWords = 16;  // 1024 NUMA nodes
  bool mem = false;
  std::array<unsigned long, kMaskWords> nodes{};
};

Binding binding_of(const ChildSpec& spec) {
  Binding b;
  CPU_ZERO(&b.cpu_set);
  for (int cpu : spec.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) {
      CPU_SET(static_cast<std::size_t>(cpu), &b.cpu_set);
      b.cpus = true;
    }
  }
  constexpr std::size_t kBits = 8 * sizeof(unsigned long);
  for (int node : spec.mem_nodes) {
    const auto n = static_cast<std::size_t>(node);
    if (node >= 0 && n < Binding::kMaskWords * kBits) {
      b.nodes[n / kBits] |= 1UL << (n % kBits);
      b.mem = true;
    }
  }
  return b;
}

// Binds the child as `b` says: false when the CPU set was refused (errno set).
bool bind_child(const Binding& b) {
  if (b.cpus && ::sched_setaffinity(0, sizeof b.cpu_set, &b.cpu_set) != 0) return false;
  if (b.mem) {
    // Refused inside many containers (no CAP_SYS_NICE is needed, but seccomp may say no).
    (void)::syscall(SYS_set_mempolicy, MPOL_BIND, b.nodes.data(),
                    Binding::kMaskWords * 8 * sizeof(unsigned long));
  }
  return true;
}

// The child's side of spawn(). Never returns.
[[noreturn]] void child(const ChildSpec& spec, const Binding& binding, pid_t parent, char** argv,
                        char** envp, int status_fd, bool join_cgroup) {
  // spec is the parent's object, shared copy-on-write: only read here.
  if (join_cgroup) (void)!::write(spec.cgroup_procs_fd, "0", 1);
  if (spec.own_group) ::setpgid(0, 0);
  if (spec.death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, spec.death_signal);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the prctl
  }
  if (spec.stdin_fd >= 0) ::dup2(spec.stdin_fd, 0);
  if (spec.stdout_fd >= 0) ::dup2(spec.stdout_fd, 1);
  if (spec.stderr_fd >= 0) ::dup2(spec.stderr_fd, 2);
  if (spec.keep_fd >= 0) {
    const int flags = ::fcntl(spec.keep_fd, F_GETFD);
    if (flags >= 0) ::fcntl(spec.keep_fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT, SIGTSTP})
    ::sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (!argv) ::_exit(spec.main ? spec.main() : 0);
  restore_fd_limit_in_child();  // the program gets the limit hvdrun was started with
  int report[2] = {0, 0};
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) {
    report[0] = 1;
  } else if (!bind_child(binding)) {
    report[0] = 3;
  } else {
    if (envp) environ = envp;  // execvp searches the child's own PATH
    if (spec.path.empty()) {
      ::execvp(argv[0], argv);
    } else {
      ::execv(spec.path.c_str(), argv);
    }
    report[0] = 2;
  }
  report[1] = errno;
  if (status_fd >= 0) (void)!::write(status_fd, report, sizeof report);
  ::_exit(127);
}

}  // namespace

Child spawn(const ChildSpec& spec) {
  const bool exec = !spec.argv.empty();
  std::vector<char*> argv = exec ? c_strings(spec.argv) : std::vector<char*>{};
  std::vector<char*> envp = spec.env ? c_strings(*spec.env) : std::vector<char*>{};
  UniqueFd status_r;
  UniqueFd status_w;
  if (exec) std::tie(status_r, status_w) = make_pipe();
  const Binding binding = binding_of(spec);
  const pid_t parent = ::getpid();
  // Only an exec'd child starts in its cgroup by clone3: a `main` child runs arbitrary code.
  pid_t pid = exec && spec.cgroup_dir_fd >= 0 ? fork_into_cgroup(spec.cgroup_dir_fd) : -1;
  const bool started_in_cgroup = pid >= 0;
  if (!started_in_cgroup) pid = ::fork();
  if (pid < 0) throw_errno("starting " + spec.what, "fork");
  if (pid == 0) {
    child(spec, binding, parent, exec ? argv.data() : nullptr, spec.env ? envp.data() : nullptr,
          status_w.get(), !started_in_cgroup && spec.cgroup_procs_fd >= 0);
  }
  // Also from here, so that kill(-pid) works whichever of the two runs first.
  if (spec.own_group) ::setpgid(pid, pid);
  return Child{pid, std::move(status_r)};
}

pid_t fork_into_cgroup(int cgroup_dir_fd) {
#if defined(SYS_clone3) && !defined(HVDRUN_FORK_ONLY)
  // struct clone_args of <linux/sched.h> up to its cgroup field (the size tells the kernel).
  struct {
    std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
  } args{};
  constexpr std::uint64_t kCloneIntoCgroup = 0x200000000ULL;
  args.flags = kCloneIntoCgroup;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(cgroup_dir_fd);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
#else
  (void)cgroup_dir_fd;
  errno = ENOSYS;
  return -1;
#endif
}

std::optional<ExecFailure> read_exec_failure(int exec_status_fd) {
  int report[2] = {0, 0};
  ssize_t n = 0;
  do {
    n = ::read(exec_status_fd, report, sizeof report);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof report)) return std::nullopt;
  return ExecFailure{report[0] == 1, report[0] == 3, report[1]};
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

std::string describe_exit(int wait_status) {
  if (WIFEXITED(wait_status)) return "exited with code " + std::to_string(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(wait_status)) + " (" +
           strsignal(WTERMSIG(wait_status)) + ")";
  }
  return "ended with status " + std::to_string(wait_status);
}

namespace {

// Blocks until PID has ended or DEADLINE has passed: a pidfd turns readable when its process
// exits, so the caller learns of the exit at once rather than at its next look. False when no
// pidfd can be had (a kernel before 5.3): the caller then looks at intervals.
bool await_end(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  const UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!fd) return false;
  pollfd ended{fd.get(), POLLIN, 0};
  while (::poll(&ended, 1, poll_ms_left(deadline)) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace

std::string wait_or_kill(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  auto delay = std::chrono::microseconds(200);
  bool by_pidfd = true;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return describe_exit(status);
    if (r < 0 && errno != EINTR) return {};
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return "did not exit in time and was killed";
    }
    if (by_pidfd) by_pidfd = await_end(pid, deadline);
    if (by_pidfd) continue;
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::microseconds(20000));
  }
}

SignalMask::SignalMask(std::initializer_list<int> signals)
    : signals_(signals), old_(signals.size()), seen_(signals.size()) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigset_t block;
  sigemptyset(&block);
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    sigaddset(&block, signals_[i]);
    seen_[i] = g_arrivals[static_cast<std::size_t>(signals_[i])];
    ::sigaction(signals_[i], &sa, &old_[i]);
  }
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old_pipe_);
  ::pthread_sigmask(SIG_BLOCK, &block, &old_mask_);
  g_last = 0;
  wait_mask_ = old_mask_;
  for (int s : signals_) sigdelset(&wait_mask_, s);
}

SignalMask::~SignalMask() {
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  for (std::size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

int SignalMask::take(int sig) {
  for (std::size_t i = 0; i < signals_.size(); ++i) {
    if (signals_[i] != sig) continue;
    const int now = g_arrivals[static_cast<std::size_t>(sig)];
    return now - std::exchange(seen_[i], now);
  }
  return 0;
}

int SignalMask::last() { return g_last; }

}  // namespace hvdrun::launcher
