// The agent's single poll loop: ranks' stdout/stderr pipes, their exec-status pipes, the
// launcher stream, and signals (blocked except inside ppoll, so none is missed between a
// check and the wait). Output is read straight into the outgoing frame queue; when that
// queue is full the rank pipes are not polled, so a slow launcher slows the ranks down
// instead of growing memory. The agent speaks first only after the launcher's hello: its own
// hello reports the interface toward the launcher's address, which the hello carries.
#include "launcher/agent.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/control_protocol.h"
#include "common/env_names.h"
#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "common/fd_limit.h"
#include "launcher/agent_protocol.h"
#include "launcher/group_guard.h"
#include "launcher/job_cgroup.h"
#include "launcher/line_tail.h"
#include "launcher/local_host.h"
#include "launcher/rank_env.h"
#include "launcher/reaper.h"
#include "launcher/subprocess.h"

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Pause reading rank output while this much is waiting for the launcher.
constexpr std::size_t kQueueHighWater = 4u << 20;
// Cap on what is read from one rank pipe after the rank has exited.
constexpr std::size_t kDrainLimit = 16u << 20;
// A read that found less than this in a rank pipe makes the agent leave that pipe alone for
// kCoalesce: a rank streaming output in small writes is then read in large batches (one
// wakeup per batch instead of one per write), while a lone line still goes out at once.
constexpr std::size_t kSmallRead = 64u << 10;
constexpr auto kCoalesce = std::chrono::microseconds(1000);

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  UniqueFd out;
  UniqueFd err;
  UniqueFd exec_status;  // EOF = exec succeeded; bytes = {stage, errno}
  UniqueFd control;      // the agent's end of the rank's control channel, when asked for
  control::Decoder control_in;
  bool reaped = false;
  bool reported = false;
  // Order among this host's exits, as reaped: reports go out in it (the launcher's failure
  // message names the rank that failed first).
  std::uint64_t exit_order = 0;
  int status = 0;
  std::string argv0;
  std::string cwd;
  LineTail tail;
  Clock::time_point defer[2] = {};  // stdout, stderr: not polled before these times
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

class Agent {
 public:
  Agent(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}
  ~Agent() { sweep_groups(); }
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  int run();
  /// Last words after an exception: queued frames, then a fatal frame, within 2 s.
  /// Returns whether they reached the launcher.
  bool report_fatal(const std::string& message);

 private:
  void send(const proto::Message& m) {
    if (!out_broken_) proto::encode(m, tail());
  }
  // Where new frames go: behind a pending splice, if there is one.
  ByteQueue& tail() { return splice_left_ || !later_.empty() ? later_ : queue_; }
  bool pending() const { return !queue_.empty() || splice_left_ || !later_.empty(); }
  bool can_splice() const { return splice_ok_ && !pending() && !out_broken_; }
  std::size_t splice_rank(Rank& r);
  void handle(proto::Message& m);
  void send_hello();
  void spawn(const proto::Spawn& s);
  void read_control(Rank& r);
  void regenerate(const proto::Regenerate& g);
  void read_stdin();
  std::size_t read_rank(Rank& r, proto::Stream stream, std::size_t limit);
  void check_exec_status(Rank& r, bool blocking);
  void reap();
  void report_exits();
  void begin_kill(std::uint32_t grace_ms, const char* why);
  void job_control(bool suspend);
  void flush_queue();
  bool all_done() const;
  void sweep_groups();
  void ensure_cgroup();
  void remove_cgroup();
  // The steps of run()'s loop.
  void take_signals(SignalMask& signals);
  void check_timers(Clock::time_point now);
  bool finished(Clock::time_point now);
  Clock::time_point collect_pollfds(Clock::time_point now);
  void dispatch();

  int in_;
  int out_;
  proto::Decoder decoder_;
  // Frames to the launcher, in order: queue_, then splice_left_ bytes moved straight from
  // the pipe splice_fd_ (stdout data goes pipe to pipe without being copied through this
  // process), then later_.
  ByteQueue queue_;
  ByteQueue later_;
  int splice_fd_ = -1;
  int splice_rank_ = -1;
  std::size_t splice_left_ = 0;
  bool splice_ok_ = true;
  proto::Hello hello_;
  bool have_hello_ = false;
  bool in_eof_ = false;
  bool out_broken_ = false;
  bool closing_ = false;  // no more spawns; exit once every rank is reported
  bool killing_ = false;
  bool suspended_ = false;  // job control: ranks stopped, no silence limit
  int exit_code_ = 0;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> flush_deadline_;
  Clock::time_point last_rx_ = Clock::now();
  Clock::time_point next_heartbeat_ = Clock::now();
  std::map<int, Rank> ranks_;
  std::map<pid_t, int> by_pid_;
  std::uint64_t exits_ = 0;  // ranks reaped so far (Rank::exit_order)
  UniqueFd dev_null_;
  // Kills the rank groups if this agent is killed; released after sweep_groups().
  std::optional<GroupGuard> guard_;
  // The job's cgroup on this host, made at the first spawn where cgroup v2 allows it.
  // Declared after guard_: on the way out it is emptied while the guard still watches.
  std::optional<JobCgroup> cgroup_;
  bool cgroup_tried_ = false;
  // What the next wait polls: a rank's stdout (0), stderr (1) or exec status (2), or
  // without a rank the launcher stream in (0) or out (1).
  struct Slot {
    Rank* rank;
    int what;
  };
  std::vector<pollfd> fds_;
  std::vector<Slot> slots_;
};

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

bool Agent::all_done() const {
  for (const auto& [n, r] : ranks_) {
    if (!r.reported) return false;
  }
  return true;
}

void Agent::send_hello() {
  proto::AgentHello hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.hostname = host_name();
  try {
    hello.free_port = pick_free_port();
  } catch (const std::exception& e) {
    // 0: this host offers no port; the job goes on, and only MASTER_PORT users notice.
    spdlog::warn("no free TCP port for MASTER_PORT on this host: {}", e.what());
  }
  if (!hello_.network_interface.empty()) {
    // The Horovod rendezvous admits this host's ranks by these addresses.
    try {
      hello.iface_addrs = interface_addresses(hello_.network_interface);
    } catch (const std::exception& e) {
      spdlog::debug("addresses of {}: {}", hello_.network_interface, e.what());
    }
  }
  if (!hello_.launcher_addr.empty()) {
    // This host's own interface toward the launcher: hosts whose interfaces have different
    // names each get their own.
    try {
      hello.iface = interface_toward(hello_.launcher_addr);
    } catch (const std::exception& e) {
      spdlog::debug("no interface toward {}: {}", hello_.launcher_addr, e.what());
    }
    spdlog::debug("interface toward {}: '{}'", hello_.launcher_addr, hello.iface);
  }
  send(hello);
}

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
    std::vector<std::string> env =
        merge_rank_env(environ, s.host_env, s.env, s.env_defaults).entries();
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
    child = launcher::spawn(spec);
  } catch (const SystemError& e) {
    r.reported = true;
    std::string why = std::string(": ") + e.what();
    if (e.code() == EMFILE || e.code() == ENFILE) why += "; " + fd_limit_advice();
    send(proto::Fatal{s.rank, "cannot start rank " + std::to_string(s.rank) + why});
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

// What a rank says on its control channel goes to the launcher; its end (the rank exiting)
// closes the channel; a malformed frame is the rank's error, reported, and the channel
// closed (the rank then sees its generation end).
void Agent::read_control(Rank& r) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(r.control.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      r.control.reset();
      return;
    }
    try {
      r.control_in.feed(std::string_view(buf, static_cast<std::size_t>(n)));
      while (auto m = r.control_in.next()) {
        if (auto* e = std::get_if<control::Elastic>(&*m)) {
          send(proto::RankElastic{r.rank, e->generation});
        } else if (auto* l = std::get_if<control::Left>(&*m)) {
          send(proto::RankLeft{r.rank, l->generation});
        } else {
          throw control::ProtocolError(
              "control channel: the rank sent a message only an agent "
              "sends");
        }
      }
    } catch (const control::ProtocolError& e) {
      spdlog::warn("rank {}: {}; its control channel is closed", r.rank, e.what());
      r.control.reset();
      return;
    }
  }
}

// The job moves on in process: each listed rank hears its place (after the end of its
// generation, for a failure); the host's other ranks are stopped.
void Agent::regenerate(const proto::Regenerate& g) {
  std::map<int, const proto::RankPlacement*> placed;
  for (const auto& p : g.ranks) placed[p.old_rank] = &p;
  for (auto& [n, r] : ranks_) {
    if (r.reaped || r.pid <= 0) continue;
    auto it = placed.find(n);
    if (it == placed.end() || !r.control) {
      ::kill(-r.pid, SIGTERM);
      ::kill(-r.pid, SIGCONT);
      continue;
    }
    const proto::RankPlacement& p = *it->second;
    control::Placement m;
    m.generation = g.generation;
    m.rank = p.rank;
    m.size = g.size;
    m.local_rank = p.local_rank;
    m.local_size = p.local_size;
    m.cross_rank = p.cross_rank;
    m.cross_size = p.cross_size;
    m.rendezvous_addr = g.rendezvous_addr;
    m.rendezvous_port = g.rendezvous_port;
    m.secret = g.secret;
    m.hosts_added = g.hosts_added;
    m.hosts_removed = g.hosts_removed;
    m.failure = g.failure;
    std::string frames;
    if (g.failure) frames = control::encode(control::EndGeneration{g.generation - 1, g.reason});
    frames += control::encode(m);
    // A few hundred bytes into an empty socket buffer: a rank that cannot take them is
    // not reading its channel at all, and is stopped as unplaceable.
    const ssize_t w = ::send(r.control.get(), frames.data(), frames.size(), MSG_NOSIGNAL);
    if (w != static_cast<ssize_t>(frames.size())) {
      spdlog::warn("rank {}: its control channel did not take its placement ({}); stopping it", n,
                   w < 0 ? std::strerror(errno) : "short write");
      ::kill(-r.pid, SIGTERM);
      ::kill(-r.pid, SIGCONT);
    }
  }
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
    std::string what = failure->chdir ? "cannot change to directory '" + r.cwd + "'"
                                      : "cannot execute '" + r.argv0 + "'";
    send(proto::Fatal{r.rank, "cannot start rank " + std::to_string(r.rank) + ": " + what + ": " +
                                  std::strerror(failure->error) +
                                  exec_failure_hint(failure->chdir, failure->error, r.argv0)});
    r.reported = true;  // the fatal frame stands for its exit report
  } else {
    send(proto::RankStarted{r.rank, r.pid});
  }
}

std::size_t Agent::read_rank(Rank& r, proto::Stream stream, std::size_t limit) {
  UniqueFd& fd = stream == proto::Stream::out ? r.out : r.err;
  std::size_t total = 0;
  while (fd && total < limit) {
    std::size_t want = proto::kMaxOutputChunk;
    ByteQueue& q = tail();
    char* p = q.prepare(proto::kOutputHeaderBytes + want);
    ssize_t n = ::read(fd.get(), p + proto::kOutputHeaderBytes, want);
    if (n > 0) {
      if (stream == proto::Stream::err)
        r.tail.add({p + proto::kOutputHeaderBytes, static_cast<std::size_t>(n)});
      if (out_broken_) {  // nobody to send to; keep the pipe flowing
        total += static_cast<std::size_t>(n);
        continue;
      }
      proto::write_output_header(p, r.rank, stream, static_cast<std::uint32_t>(n));
      q.commit(proto::kOutputHeaderBytes + static_cast<std::size_t>(n));
      total += static_cast<std::size_t>(n);
      if (static_cast<std::size_t>(n) < want) return total;  // pipe drained for now
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return total;
    fd.reset();  // EOF (or a read error: treat as closed)
  }
  return total;
}

std::size_t Agent::splice_rank(Rank& r) {
  int avail = 0;
  if (::ioctl(r.out.get(), FIONREAD, &avail) != 0 || avail <= 0) {
    return read_rank(r, proto::Stream::out, proto::kMaxOutputChunk);  // EOF or error
  }
  std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(avail), 1u << 20);
  char header[proto::kOutputHeaderBytes];
  proto::write_output_header(header, r.rank, proto::Stream::out, static_cast<std::uint32_t>(n));
  queue_.append(header, sizeof header);
  splice_fd_ = r.out.get();
  splice_rank_ = r.rank;
  splice_left_ = n;
  flush_queue();
  return n;
}

// Exits are first seen without being reaped (WNOWAIT): while a rank is a zombie, its pid,
// which is its process group's id, cannot be given to another process, so the guard is told
// to forget that group before the rank is reaped and the id freed. A guard that learnt it
// after the reap could, if this agent died in between, kill whatever group got the id next.
void Agent::reap() {
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) break;
    const pid_t pid = si.si_pid;
    const auto it = by_pid_.find(pid);
    if (it != by_pid_.end() && guard_) guard_->forget(pid);
    int status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (got != pid) break;              // not for a zombie child of ours; never spin on it
    if (it == by_pid_.end()) continue;  // adopted, or the guard
    Rank& r = ranks_[it->second];
    // The pid may come back as an adopted orphan's: that one is not this rank.
    by_pid_.erase(it);
    r.reaped = true;
    r.status = status;
    r.exit_order = ++exits_;
  }
  // Stops and continues (these reap nothing).
  for (;;) {
    siginfo_t si{};
    if (::waitid(P_ALL, 0, &si, WSTOPPED | WCONTINUED | WNOHANG) != 0 || si.si_pid == 0) break;
    const auto it = by_pid_.find(si.si_pid);
    if (it == by_pid_.end()) continue;
    // Stops of our own (a suspend) are the launcher's doing; others it needs to know of.
    if (!suspended_ && !killing_)
      send(proto::RankStopped{it->second, si.si_code == CLD_CONTINUED ? 0 : si.si_status});
  }
}

// In the order the exits were reaped, not by rank: a rank that exits because another one
// did must not be reported first. A rank whose last output is still moving holds back the
// reports of every rank reaped after it.
void Agent::report_exits() {
  std::vector<Rank*> exited;
  for (auto& [n, r] : ranks_) {
    if (r.reaped && !r.reported) exited.push_back(&r);
  }
  std::sort(exited.begin(), exited.end(),
            [](const Rank* a, const Rank* b) { return a->exit_order < b->exit_order; });
  for (Rank* rp : exited) {
    Rank& r = *rp;
    if (splice_left_ && splice_rank_ == r.rank) return;  // its last bytes are still moving
    check_exec_status(r, /*blocking=*/true);
    if (r.reported) continue;  // failed to start: already reported as fatal
    // Whatever the rank wrote before exiting is in its pipes: send it first.
    read_rank(r, proto::Stream::out, kDrainLimit);
    read_rank(r, proto::Stream::err, kDrainLimit);
    r.out.reset();
    r.err.reset();
    proto::RankExited ex;
    ex.rank = r.rank;
    ex.signaled = WIFSIGNALED(r.status);
    ex.value = ex.signaled ? WTERMSIG(r.status) : WEXITSTATUS(r.status);
    ex.stderr_tail = r.tail.lines();
    send(ex);
    r.reported = true;
    spdlog::debug("rank {} {} {}", r.rank, ex.signaled ? "killed by signal" : "exited with",
                  ex.value);
  }
}

void Agent::handle(proto::Message& m) {
  if (auto* h = std::get_if<proto::Hello>(&m)) {
    if (h->version != proto::kVersion) {
      send(proto::Fatal{-1, "agent speaks protocol version " + std::to_string(proto::kVersion) +
                                " but the launcher speaks " + std::to_string(h->version) +
                                "; install the same hvdrun version on every host"});
      closing_ = true;
      in_eof_ = true;
      exit_code_ = 1;
      return;
    }
    hello_ = *h;
    have_hello_ = true;
    spdlog::set_level(spdlog::level::from_str(hello_.log_level));
    send_hello();
    return;
  }
  if (!have_hello_) throw proto::ProtocolError("agent protocol: expected hello first");
  if (auto* s = std::get_if<proto::Spawn>(&m)) {
    spawn(*s);
  } else if (auto* k = std::get_if<proto::Kill>(&m)) {
    begin_kill(k->grace_ms, "kill requested by the launcher");
  } else if (std::holds_alternative<proto::Heartbeat>(m)) {
    // last_rx_ already updated
  } else if (std::holds_alternative<proto::Suspend>(m)) {
    job_control(true);
  } else if (std::holds_alternative<proto::Resume>(m)) {
    job_control(false);
  } else if (auto* g = std::get_if<proto::Regenerate>(&m)) {
    regenerate(*g);
  } else if (auto* f = std::get_if<proto::Fatal>(&m)) {
    spdlog::error("launcher reported: {}", f->message);
    begin_kill(hello_.kill_grace_ms, "launcher failed");
  } else {
    throw proto::ProtocolError(std::string("agent protocol: unexpected ") + proto::type_name(m) +
                               " frame from the launcher");
  }
}

void Agent::read_stdin() {
  for (;;) {
    char* p = decoder_.prepare(64 << 10);
    ssize_t n = ::read(in_, p, 64 << 10);
    if (n > 0) {
      decoder_.commit(static_cast<std::size_t>(n));
      last_rx_ = Clock::now();
      while (auto m = decoder_.next()) handle(*m);
      if (in_eof_) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    in_eof_ = true;
    begin_kill(have_hello_ ? hello_.kill_grace_ms : 3000, "launcher closed the stream");
    return;
  }
}

void Agent::flush_queue() {
  while (pending() && !out_broken_) {
    ssize_t n;
    if (!queue_.empty()) {
      n = ::write(out_, queue_.data(), queue_.size());
      if (n > 0) queue_.consume(static_cast<std::size_t>(n));
    } else if (splice_left_) {
      n = ::splice(splice_fd_, nullptr, out_, nullptr, splice_left_,
                   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
      if (n > 0) splice_left_ -= static_cast<std::size_t>(n);
      if (n < 0 && errno == EINVAL) {
        // This stream cannot take spliced pages (not a pipe or socket): copy instead. The
        // bytes are known to be in the pipe already.
        splice_ok_ = false;
        char* p = queue_.prepare(splice_left_);
        std::size_t got = 0;
        while (got < splice_left_) {
          ssize_t r = ::read(splice_fd_, p + got, splice_left_ - got);
          if (r <= 0 && errno != EINTR) break;
          if (r > 0) got += static_cast<std::size_t>(r);
        }
        queue_.commit(got);
        splice_left_ = 0;
        continue;
      }
      if (n == 0) errno = EPIPE;  // the data we counted vanished: cannot happen
    } else {
      std::swap(queue_, later_);
      continue;
    }
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // The launcher is gone: nothing more can be reported; kill the ranks.
    out_broken_ = true;
    queue_.clear();
    later_.clear();
    splice_left_ = 0;
    begin_kill(have_hello_ ? hello_.kill_grace_ms : 3000, "launcher stream broken");
  }
}

bool Agent::report_fatal(const std::string& message) {
  if (out_broken_) return false;
  try {
    proto::encode(proto::Fatal{-1, message}, tail());
  } catch (const std::exception&) {
    return false;
  }
  auto deadline = Clock::now() + milliseconds(2000);
  while (pending() && !out_broken_ && Clock::now() < deadline) {
    pollfd p{out_, POLLOUT, 0};
    ::poll(&p, 1, 100);
    flush_queue();
  }
  return !pending() && !out_broken_;
}

int Agent::run() {
  SignalMask signals({SIGCHLD, SIGTERM, SIGINT, SIGHUP});
  // Orphans of the ranks' trees come here, not to init, so that sweep_groups() finds them.
  if (!become_subreaper())
    spdlog::warn(
        "cannot become a child subreaper ({}): what ranks start with setsid may "
        "outlive the job",
        std::strerror(errno));
  dev_null_.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!dev_null_) throw_errno("opening /dev/null for rank stdin", "open");
  guard_.emplace();
  set_nonblocking(in_);
  set_nonblocking(out_);
  for (;;) {
    take_signals(signals);
    report_exits();
    const auto now = Clock::now();
    check_timers(now);
    flush_queue();
    if (finished(now)) break;
    const auto wake = collect_pollfds(now);
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now);
    if (left.count() < 0) left = {};
    timespec ts{static_cast<time_t>(left.count() / 1000000000),
                static_cast<long>(left.count() % 1000000000)};
    int rc = ::ppoll(fds_.data(), fds_.size(), &ts, signals.wait_mask());
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_errno("agent main loop", "ppoll");
    }
    dispatch();
  }
  sweep_groups();
  guard_.reset();
  return exit_code_;
}

void Agent::take_signals(SignalMask& signals) {
  if (signals.take(SIGCHLD) > 0) reap();
  if (signals.take(SIGTERM) + signals.take(SIGINT) + signals.take(SIGHUP) > 0) {
    spdlog::debug("signal {}", SignalMask::last());
    in_eof_ = true;
    begin_kill(have_hello_ ? hello_.kill_grace_ms : 3000, "agent received a signal");
  }
}

// The SIGKILL after the grace, the launcher's silence limit, and our own heartbeat.
void Agent::check_timers(Clock::time_point now) {
  if (killing_ && kill_at_ && now >= *kill_at_) {
    for (auto& [n, r] : ranks_) {
      if (!r.reaped && r.pid > 0) ::kill(-r.pid, SIGKILL);
    }
    kill_at_.reset();
  }
  if (have_hello_ && !in_eof_ && !suspended_ && hello_.heartbeat_timeout_ms > 0 &&
      now - last_rx_ > milliseconds(hello_.heartbeat_timeout_ms)) {
    const std::string why =
        "nothing heard from hvdrun for " + std::to_string(hello_.heartbeat_timeout_ms) +
        " ms (HVDRUN_HEARTBEAT_TIMEOUT): hvdrun was stopped (SIGSTOP), hangs or cannot be "
        "reached; stopped every rank on " +
        host_name();
    spdlog::debug("{}", why);
    send(proto::Fatal{-1, why});  // read by a launcher that was only stopped, once continued
    in_eof_ = true;
    exit_code_ = 1;
    begin_kill(hello_.kill_grace_ms, "launcher heartbeats stopped");
  }
  if (have_hello_ && !in_eof_ && !suspended_ && now >= next_heartbeat_) {
    send(proto::Heartbeat{});
    next_heartbeat_ = now + milliseconds(std::max<std::uint32_t>(hello_.heartbeat_interval_ms, 10));
  }
}

// True once the launcher is gone or done and every rank is reported (and the last frames
// went out, or had their moment).
bool Agent::finished(Clock::time_point now) {
  if (!in_eof_ || !all_done()) return false;
  if (!pending() || out_broken_) return true;
  // Give the launcher a moment to take the last frames, then go anyway.
  if (!flush_deadline_) flush_deadline_ = now + milliseconds(2000);
  return now >= *flush_deadline_;
}

// Fills fds_/slots_ for the next wait; returns when to wake up at the latest: the next
// heartbeat, the SIGKILL deadline, the launcher's silence limit, or a deferred rank pipe.
Clock::time_point Agent::collect_pollfds(Clock::time_point now) {
  fds_.clear();
  slots_.clear();
  auto add = [this](int fd, short events, Rank* rank, int what) {
    fds_.push_back({fd, events, 0});
    slots_.push_back({rank, what});
  };
  if (!in_eof_) add(in_, POLLIN, nullptr, 0);
  if (pending() && !out_broken_) add(out_, POLLOUT, nullptr, 1);
  const bool room = queue_.size() + later_.size() < kQueueHighWater || out_broken_;
  auto wake = have_hello_ && !in_eof_ && !suspended_ ? next_heartbeat_ : now + milliseconds(1000);
  for (auto& [n, r] : ranks_) {
    for (int k = 0; k < 2; ++k) {
      UniqueFd& fd = k == 0 ? r.out : r.err;
      if (!room || !fd) continue;
      if (k == 0 && splice_left_ && splice_rank_ == r.rank) continue;  // not past the splice
      if (r.defer[k] > now) {
        wake = std::min(wake, r.defer[k]);
      } else {
        add(fd.get(), POLLIN, &r, k);
      }
    }
    if (r.exec_status) add(r.exec_status.get(), POLLIN, &r, 2);
    if (r.control) add(r.control.get(), POLLIN, &r, 3);
  }
  if (kill_at_) wake = std::min(wake, *kill_at_);
  if (have_hello_ && !in_eof_ && !suspended_ && hello_.heartbeat_timeout_ms > 0) {
    wake = std::min(wake, last_rx_ + milliseconds(hello_.heartbeat_timeout_ms) + milliseconds(1));
  }
  if (flush_deadline_) wake = std::min(wake, *flush_deadline_);
  return wake;
}

// Acts on every descriptor the wait found ready.
void Agent::dispatch() {
  for (std::size_t i = 0; i < fds_.size(); ++i) {
    if (!fds_[i].revents) continue;
    const Slot& s = slots_[i];
    if (!s.rank) {
      if (s.what == 0) read_stdin();
      if (s.what == 1) flush_queue();
    } else if (s.what == 2) {
      check_exec_status(*s.rank, false);
    } else if (s.what == 3) {
      read_control(*s.rank);
    } else {
      // Output means the rank has exec'd (or failed to): report that first, so that its
      // output never precedes its start report when both are ready in one turn. The status
      // pipe is closed or written by then, so this does not block.
      check_exec_status(*s.rank, /*blocking=*/true);
      std::size_t got =
          s.what == 0 && can_splice()
              ? splice_rank(*s.rank)
              : read_rank(*s.rank, s.what == 0 ? proto::Stream::out : proto::Stream::err,
                          4 * proto::kMaxOutputChunk);
      if (got < kSmallRead) s.rank->defer[s.what] = Clock::now() + kCoalesce;
    }
  }
}

}  // namespace

int run_agent(int in_fd, int out_fd) {
  // The agent's own diagnostics go to its stderr; the launcher shows them (local) or the
  // SSH channel carries them (remote).
  Agent agent(in_fd, out_fd);
  try {
    return agent.run();
  } catch (const std::exception& e) {
    // Report to the launcher when the stream still works, then make sure no rank survives.
    // The launcher prints the fatal frame; say it here only when it cannot arrive.
    if (!agent.report_fatal(std::string("agent on ") + host_name() + ": " + e.what())) {
      spdlog::error("{}", e.what());
    }
    return exit_status::kAgentFailed;  // ~Agent kills every rank group
  }
}

}  // namespace hvdrun::launcher
