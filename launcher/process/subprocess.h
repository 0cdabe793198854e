// The process layer of the launcher and the agent, in one place (in the spirit of ninja's
// Subprocess): starting a child (its own process group, a death signal, stdio, default
// signal dispositions and an empty mask, then exec or a function), telling how it ended,
// and the signal mask of a supervision loop (signals blocked except inside its ppoll, so
// none arrives between a check and the wait). The agent's ranks, the local agent and the
// agent's group guard are all started here.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"

namespace hvdrun::launcher {

/// How to start a child.
struct ChildSpec {
  /// What the child is, for error messages ("the local agent /usr/bin/hvdrun").
  std::string what = "a child process";
  /// Program and arguments, run with execvp (PATH from `env` when given). Empty: the
  /// child runs `main` instead, without exec.
  std::vector<std::string> argv;
  /// The file to execute (execv); empty: argv[0], searched in PATH (execvp).
  std::string path;
  /// With `argv` empty: the child's code; its result is the exit code (_exit, so no exit
  /// handler or static destructor of the parent's state runs). Only for a single-threaded
  /// parent: another thread could hold a lock (malloc's included) at the fork.
  std::function<int()> main;
  /// The child's environment (NAME=VALUE each); nullptr: the parent's.
  const std::vector<std::string>* env = nullptr;
  /// Working directory; empty: the parent's.
  std::string cwd;
  /// Descriptors that become the child's stdin, stdout, stderr; -1 keeps the parent's.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  /// Put the child in a process group of its own (terminal signals then reach the
  /// launcher alone, and kill(-pid) reaches everything the child starts).
  bool own_group = true;
  /// Signal the child gets when its parent dies (PR_SET_PDEATHSIG); 0: none. A child
  /// whose parent is already gone exits at once.
  int death_signal = 0;
  /// The cgroup the child starts in, so that it and all it starts belong to that cgroup
  /// from before exec (JobCgroup::dir_fd, JobCgroup::procs_fd); -1: none. An exec'd child
  /// is started in it (fork_into_cgroup); where that is refused, the child writes "0" to
  /// cgroup.procs first, and a failed write leaves it where it was.
  int cgroup_dir_fd = -1;
  int cgroup_procs_fd = -1;
  /// A descriptor the child keeps across exec under its own number (its close-on-exec
  /// flag cleared in the child only); -1: none.
  int keep_fd = -1;
  /// CPUs (kernel numbers) the child is bound to before exec (sched_setaffinity); empty:
  /// the parent's. A CPU set the kernel refuses fails the start like a failed exec.
  std::vector<int> cpus;
  /// NUMA nodes the child's memory is bound to before exec (set_mempolicy MPOL_BIND);
  /// empty: the parent's policy. A policy the kernel refuses is left as it was (containers
  /// often forbid it), the CPU binding still holds.
  std::vector<int> mem_nodes;
};

/// A started child.
struct Child {
  /// Its pid.
  pid_t pid = -1;
  /// For an exec'd child: EOF when exec succeeded, else an ExecFailure (read_exec_failure).
  UniqueFd exec_status;
};

/// Starts a child as `spec` says. Throws SystemError when the pipe or the fork fails.
Child spawn(const ChildSpec& spec);

/// A fork whose child starts in the cgroup of the open directory `cgroup_dir_fd` (clone3's
/// CLONE_INTO_CGROUP, Linux 5.7). A child that joins by writing to cgroup.procs instead
/// takes the write side of the kernel's cgroup-wide fork lock, and the first such writer in a
/// while waits for an RCU grace period: 5-15 ms on a small host, more than the rest of a
/// small job's start. Returns the child's pid, 0 in the child (which may then make only
/// async-signal-safe calls that do not depend on the parent's thread state, and exec or
/// _exit), or -1 with errno where the kernel, a seccomp filter (container runtimes answer
/// ENOSYS for clone3) or the cgroup's permissions refuse it. Built with a sanitizer it is
/// always -1 (ENOSYS): their run-time libraries prepare their locks for fork() alone.
pid_t fork_into_cgroup(int cgroup_dir_fd);

/// Why an exec'd child did not start.
struct ExecFailure {
  /// True when changing to the working directory failed.
  bool chdir = false;
  /// True when the CPUs the child was to be bound to were refused (ChildSpec::cpus).
  bool bind = false;
  /// (Neither: exec failed.)
  /// The errno of the failed call.
  int error = 0;
};

/// Reads a child's exec-status pipe (blocking until exec or failure): nullopt when exec
/// succeeded.
std::optional<ExecFailure> read_exec_failure(int exec_status_fd);

/// "exited with code N", "was killed by signal N (NAME)".
std::string describe_exit(int wait_status);

/// "signal 15 (SIGTERM)".
std::string signal_text(int sig);

/// Waits for child `pid` until `deadline` (woken by its pidfd as it exits; on kernels
/// without pidfds, by looking at a short backoff); then SIGKILLs and reaps it. Returns how it
/// ended, or "did not exit in time and was killed".
std::string wait_or_kill(pid_t pid, std::chrono::steady_clock::time_point deadline);

/// The signals a supervision loop handles itself. While alive: they are blocked (threads
/// started later inherit the block, so only the loop sees them, inside ppoll with
/// wait_mask()), a handler counts each arrival, and SIGPIPE is ignored. The destructor
/// restores the mask and the dispositions.
class SignalMask {
 public:
  explicit SignalMask(std::initializer_list<int> signals);
  ~SignalMask();
  SignalMask(const SignalMask&) = delete;
  SignalMask& operator=(const SignalMask&) = delete;

  /// The caller's mask with these signals unblocked: for ppoll.
  const sigset_t* wait_mask() const { return &wait_mask_; }
  /// How many times `sig` arrived since the last take(sig).
  int take(int sig);
  /// The latest of these signals to arrive, or 0.
  static int last();

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> old_;
  std::vector<int> seen_;
  struct sigaction old_pipe_ {};
  sigset_t old_mask_{};
  sigset_t wait_mask_{};
};

}  // namespace hvdrun::launcher
