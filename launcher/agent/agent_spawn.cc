// Spawning the agent's ranks (agent_state.h): each in its own process group (killed with the
// agent: GroupGuard) and, where cgroup v2 allows, in the job's cgroup; why one could not
// start; the kill with its grace; job control (Ctrl-Z) and the sweep of what ranks leave
// behind.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/env_names.h"
#include "common/error.h"
#include "common/fd.h"
#include "common/fd_limit.h"
#include "common/stack_file.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/agent/agent_state.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/rank_devices.h"
#include "launcher/plan/rank_env.h"
#include "launcher/process/job_cgroup.h"
#include "launcher/process/line_tail.h"
#include "launcher/process/reaper.h"
#include "launcher/process/subprocess.h"

namespace hvdrun::launcher::agent_detail {

const HostTopology& this_host() {
  static const HostTopology topology = load_host_topology();
  return topology;
}

namespace {

// The CPUs and memory nodes of the rank with environment `env`, and its GPUs, OMP_NUM_THREADS
// and NIC in `env`, when its policy asks for them (placement_env.h, rank_devices.h).
// `s`'s variables without hvdrun's defaults tell what the user set (OMP_NUM_THREADS, the NIC's
// variables); they are merged only for a rank that is placed. Throws UsageError when this
// host cannot place it.
void apply_placement(const proto::Spawn& s, EnvList& env, ChildSpec& spec) {
  const int rank = s.rank;
  const std::vector<std::string>& entries = env.entries();
  if (!policy_from_env(entries) && !env.get(kHostGpusVar) && !env.get(kNetworkInterfacesVar)) {
    return;
  }
  const EnvList given = merge_rank_env(environ, s.host_env, s.env, {});
  const HostTopology& here = this_host();
  const bool nic_given = std::any_of(std::begin(kNicVars), std::end(kNicVars),
                                     [&](const char* name) { return given.get(name) != nullptr; });
  const auto setup =
      rank_setup(here, here.hostname, entries, given.get("OMP_NUM_THREADS") != nullptr,
                 interface_present, nic_given);
  if (!setup) return;
  spec.cpus = setup->placed.cpus;
  if (setup->bind_memory) spec.mem_nodes = setup->placed.numa;
  for (const auto& e : setup->env) env.set_entry(e);
  spdlog::debug("rank {} bound to CPUs {} and NUMA nodes {}, GPUs {}, NIC {}", rank,
                cpu_list_text(setup->placed.cpus), cpu_list_text(setup->placed.numa),
                cpu_list_text(setup->placed.gpus), setup->placed.nic);
}

}  // namespace

void Agent::spawn(const proto::Spawn& s) {
  // In-process elastic recovery starts a new process under the number of one that ended
  // and was reported.
  if (auto old = ranks_.find(s.rank); old != ranks_.end() && old->second.reaped &&
                                      old->second.reported && !old->second.out && !old->second.err)
    ranks_.erase(old);
  if (ranks_.count(s.rank)) {
    send(proto::Fatal{s.rank, "rank " + std::to_string(s.rank) + " was asked to start twice"});
    return;
  }
  Rank& r = ranks_[s.rank];
  r.rank = s.rank;
  if (closing_) {
    // The launcher still counts on hearing about this rank.
    r.reported = true;
    send(proto::Fatal{s.rank,
                      "rank " + std::to_string(s.rank) + " not started: the agent is stopping"});
    return;
  }
  r.argv0 = s.argv[0];
  r.cwd = s.cwd;
  r.tail = LineTail(s.stderr_tail_lines);

  ensure_cgroup();
  ensure_error_dir();
  UniqueFd out_r, out_w, err_r, err_w, control_mine, control_rank;
  Child child;
  try {
    std::tie(out_r, out_w) = make_pipe();
    std::tie(err_r, err_w) = make_pipe();
    // Bigger pipes mean fewer wakeups for chatty ranks; failure is harmless.
    ::fcntl(out_r.get(), F_SETPIPE_SZ, 1 << 20);

    ChildSpec spec;
    spec.what = "rank " + std::to_string(s.rank);
    spec.argv = s.argv;
    // The host's own variables that the launcher asked for (a login's HOME, a container's
    // whole environment), under what it sets.
    EnvList merged = merge_rank_env(environ, s.host_env, s.env, s.env_defaults);
    if (error_dir_) {
      const std::string file = error_dir_->fresh_path(s.rank);
      merged.set(env_names::kErrorFile, file);
      merged.set(env_names::kTorchElasticErrorFile, file);
      // The stack report (agent_stacks.cc): the file and the signal that asks for it.
      merged.set(stack_file::kFileEnv, error_dir_->fresh_stack_path(s.rank));
      merged.set(stack_file::kSignalEnv, std::to_string(stack_file::signal_number()));
    }
    apply_placement(s, merged, spec);
    std::vector<std::string> env = merged.entries();
    if (s.control) {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        throw_errno("the control channel of rank " + std::to_string(s.rank), "socketpair");
      control_mine.reset(sv[0]);
      control_rank.reset(sv[1]);
      spec.keep_fd = sv[1];
      const std::string name = std::string(env_names::kControlFd) + "=";
      std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
      env.push_back(name + std::to_string(sv[1]));
    }
    spec.env = &env;
    spec.cwd = s.cwd;
    spec.stdin_fd = dev_null_.get();
    spec.stdout_fd = out_w.get();
    spec.stderr_fd = err_w.get();
    spec.death_signal = SIGKILL;
    spec.cgroup_procs_fd = cgroup_ ? cgroup_->procs_fd() : -1;
    spec.cgroup_dir_fd = cgroup_ ? cgroup_->dir_fd() : -1;
    child = launcher::spawn(spec);
  } catch (const SystemError& e) {
    r.reported = true;
    std::string why = std::string(": ") + e.what();
    if (e.code() == EMFILE || e.code() == ENFILE) why += "; " + fd_limit_advice();
    send(proto::Fatal{s.rank, "cannot start rank " + std::to_string(s.rank) + why});
    return;
  } catch (const UsageError& e) {  // the host cannot place the rank as --bind-to asks
    r.reported = true;
    send(proto::Fatal{s.rank, "cannot start rank " + std::to_string(s.rank) + ": " + e.what()});
    return;
  }
  const pid_t pid = child.pid;
  r.pid = pid;
  by_pid_[pid] = s.rank;
  if (guard_) guard_->watch(pid);
  if (suspended_) ::kill(-pid, SIGSTOP);  // started while the job is suspended
  set_nonblocking(out_r.get());
  set_nonblocking(err_r.get());
  r.out = std::move(out_r);
  r.err = std::move(err_r);
  r.exec_status = std::move(child.exec_status);
  if (control_mine) {
    set_nonblocking(control_mine.get());
    r.control = std::move(control_mine);
  }
  spdlog::debug("rank {} forked as pid {}", s.rank, pid);
}

namespace {

/// What to do about a rank that could not start: "; ..." for the reasons people meet.
std::string exec_failure_hint(bool chdir, int error, const std::string& argv0) {
  if (chdir)
    return "; ranks start in the launcher's working directory, which must exist on every "
           "host (run hvdrun from a directory shared by the hosts, or cd in the command)";
  switch (error) {
    case ENOENT:
      if (argv0.find('/') != std::string::npos)
        return "; the path must exist on this host (relative paths start from the launcher's "
               "working directory)";
      return "; install it on this host or give its full path (ranks search the PATH of "
             "the launcher's environment)";
    case EACCES:
      return "; make it executable (chmod +x) or run it through its interpreter";
    default:  // ENOEXEC never comes back: execvp runs such a file with /bin/sh
      return "";
  }
}

}  // namespace

void Agent::check_exec_status(Rank& r, bool blocking) {
  if (!r.exec_status) return;
  if (!blocking) {
    pollfd p{r.exec_status.get(), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
  }
  auto failure = read_exec_failure(r.exec_status.get());
  r.exec_status.reset();
  if (failure) {
    std::string what = failure->chdir  ? "cannot change to directory '" + r.cwd + "'"
                       : failure->bind ? std::string("cannot bind it to its CPUs (--bind-to)")
                                       : "cannot execute '" + r.argv0 + "'";
    const std::string hint =
        failure->bind ? "; the host refused the CPU set its topology gave (a cpuset changed "
                        "since the agent read it?); run with --bind-to none, or see "
                        "docs/placement.md"
                      : exec_failure_hint(failure->chdir, failure->error, r.argv0);
    send(proto::Fatal{r.rank, "cannot start rank " + std::to_string(r.rank) + ": " + what + ": " +
                                  std::strerror(failure->error) + hint});
    r.reported = true;  // the fatal frame stands for its exit report
  } else {
    send(proto::RankStarted{r.rank, r.pid});
  }
}

void Agent::begin_kill(std::uint32_t grace_ms, const char* why) {
  closing_ = true;
  if (killing_) return;
  killing_ = true;
  int live = 0;
  for (auto& [n, r] : ranks_) {
    if (!r.reaped && r.pid > 0) {
      ::kill(-r.pid, SIGTERM);
      // A stopped process acts on SIGTERM only once continued: without this, a SIGSTOPped
      // rank would hold the teardown for the whole grace period.
      ::kill(-r.pid, SIGCONT);
      ++live;
    }
  }
  if (live) spdlog::debug("{}: SIGTERM sent to {} rank(s), SIGKILL in {} ms", why, live, grace_ms);
  kill_at_ = Clock::now() + milliseconds(grace_ms);
}

// Ctrl-Z on the launcher: every rank's process group stops (or continues), as the
// processes of a shell job do. While suspended the launcher is stopped too, so its silence
// is no reason to tear down; it counts again from the resume.
void Agent::job_control(bool suspend) {
  if (killing_) return;  // a teardown lets stopped ranks continue to die
  suspended_ = suspend;
  int n = 0;
  for (auto& [rank, r] : ranks_) {
    if (!r.reaped && r.pid > 0 && ::kill(-r.pid, suspend ? SIGSTOP : SIGCONT) == 0) ++n;
  }
  last_rx_ = Clock::now();
  next_heartbeat_ = last_rx_;
  spdlog::debug("{} {} rank group(s)", suspend ? "stopped" : "continued", n);
}

void Agent::forward_signal(int signo) {
  // Only the signals the launcher forwards: a frame asking for another is refused rather
  // than passed on to the ranks.
  if (signo != SIGUSR1 && signo != SIGUSR2)
    throw proto::ProtocolError("agent protocol: signal " + std::to_string(signo) +
                               " is not one the launcher forwards (SIGUSR1, SIGUSR2)");
  if (killing_) return;
  // To each rank's own process, not its group (as mpirun and srun deliver them): the
  // program decides what its children hear (a data loader's workers, a shell's sleep).
  int n = 0;
  for (auto& [rank, r] : ranks_) {
    if (!r.reaped && r.pid > 0 && ::kill(r.pid, signo) == 0) ++n;
  }
  spdlog::debug("{} sent to {} rank(s)", strsignal(signo), n);
}

void Agent::sweep_groups() {
  // Anything a rank left behind in its process group goes too, and so does whatever this
  // agent adopted: what the ranks started in sessions of their own.
  //
  // Only the groups of ranks not yet reaped are signalled by id. An unreaped rank, alive or
  // a zombie, holds its pid and so its group's id: the id can name no one else's group. A
  // reaped rank's id is free for the kernel to hand out again once its group's last member
  // is gone, and a kill(-id) then reaches an unrelated group (a later job in the same
  // terminal, say). What a reaped rank left in its group is not lost: those processes are
  // the rank's descendants, adopted by this agent as their subreaper (kill_adopted below
  // finds them by parent, not by a number) and in the job's cgroup where there is one.
  for (auto& [n, r] : ranks_) {
    if (r.reaped || r.pid <= 0) continue;
    ::kill(-r.pid, SIGKILL);
    // kill_adopted reaps it below: the guard must not kill its id after that.
    if (guard_) guard_->forget(r.pid);
  }
  std::vector<pid_t> keep;
  if (guard_) keep.push_back(guard_->pid());
  const int n = kill_adopted(keep, Clock::now() + milliseconds(2000));
  if (n > 0) spdlog::debug("killed {} process(es) the ranks left behind", n);
  remove_cgroup();
}

namespace {

// A name that identifies the job and this agent on the host: hvdrun-JOB-PID.
std::string cgroup_name(const std::string& job_id) {
  std::string name = "hvdrun-";
  for (char c : job_id.substr(0, 64)) {
    const bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    name += plain || c == '.' || c == '_' ? c : '_';
  }
  if (!job_id.empty()) name += '-';
  return name + std::to_string(::getpid());
}

}  // namespace

void Agent::ensure_error_dir() {
  if (std::exchange(error_dir_tried_, true)) return;
  try {
    error_dir_.emplace(hello_.job_id);
  } catch (const SystemError& e) {
    spdlog::warn("the ranks get no error file (TORCHELASTIC_ERROR_FILE): {}", e.what());
  }
}

void Agent::ensure_cgroup() {
  if (cgroup_tried_) return;
  cgroup_tried_ = true;
  std::string why_not;
  cgroup_ = JobCgroup::create(cgroup_name(hello_.job_id), why_not);
  if (!cgroup_) {
    spdlog::debug("no job cgroup ({}); what ranks start is left to this agent as subreaper",
                  why_not);
    return;
  }
  if (guard_) guard_->watch_cgroup(cgroup_->dir());
  spdlog::debug("ranks run in the cgroup {}", cgroup_->dir());
}

// After the groups and the adopted: whatever still runs in the job's cgroup (it left the
// rank's tree for another parent) goes too, and the cgroup with it.
void Agent::remove_cgroup() {
  if (!cgroup_) return;
  const std::string dir = cgroup_->dir();
  const std::size_t left = cgroup_pids(dir).size();
  const std::string why = cgroup_->remove(Clock::now() + milliseconds(5000));
  cgroup_.reset();
  if (!why.empty()) {
    spdlog::warn("job cgroup: {}", why);
  } else {
    spdlog::debug("removed the cgroup {}{}", dir,
                  left ? " after killing " + std::to_string(left) + " process(es) in it" : "");
  }
}
}  // namespace hvdrun::launcher::agent_detail
