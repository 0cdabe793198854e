// The agent's single poll loop: ranks' stdout/stderr pipes, their exec-status pipes, the
// launcher stream, and signals (blocked except inside ppoll, so none is missed between a
// check and the wait). Output is read straight into the outgoing frame queue; when that
// queue is full the rank pipes are not polled, so a slow launcher slows the ranks down
// instead of growing memory. The agent speaks first only after the launcher's hello: its own
// hello reports the interface toward the launcher's address, which the hello carries.
//
// The Agent's parts live in agent_state.h and the agent_*.cc files beside this one.
#include "launcher/agent/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/agent/agent_state.h"
#include "launcher/plan/local_host.h"
#include "launcher/process/reaper.h"
#include "launcher/process/subprocess.h"
#include "launcher/topology/topology_wire.h"

namespace hvdrun::launcher::agent_detail {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

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
  if (hello_.want_topology) {
    // The launcher plans and reports this host's ranks from it; without it, it says so and
    // the ranks are placed here as they start.
    try {
      hello.topology = topology_to_wire(this_host());
    } catch (const std::exception& e) {
      spdlog::warn("this host's topology cannot be sent to the launcher: {}", e.what());
    }
  }
  send(hello);
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
  if (auto* end = std::get_if<proto::JobEnd>(&m)) {
    // Also before any hello: a join that failed ends the nodes that had joined.
    job_end_ = *end;
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
  } else if (auto* sig = std::get_if<proto::Signal>(&m)) {
    forward_signal(sig->signo);

  } else if (auto* g = std::get_if<proto::Regenerate>(&m)) {
    regenerate(*g);
  } else if (auto* q = std::get_if<proto::StacksRequest>(&m)) {
    request_stacks(*q);
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
  // SIGUSR1 and SIGUSR2 sent to the agent itself (Slurm's --signal reaches the step's
  // tasks, the agents) go on to its ranks, as the launcher's forwarded ones do.
  // SIGQUIT (a terminal's Ctrl-\ reaches a local agent in hvdrun's process group) asks hvdrun
  // for the stack report: the agent takes it, so that it does not end it.
  SignalMask signals({SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT});
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
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (signals.take(sig) > 0) forward_signal(sig);
  }
  if (signals.take(SIGQUIT) > 0) spdlog::debug("SIGQUIT: left to hvdrun (the stack report)");
}

// The SIGKILL after the grace, the launcher's silence limit, and our own heartbeat.
void Agent::check_timers(Clock::time_point now) {
  check_stacks(now, false);
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
  // A stacks request: look at the ranks' files every few milliseconds until they are whole.
  if (stacks_) wake = std::min(wake, std::min(stacks_->until, now + milliseconds(10)));
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

bool Agent::all_done() const {
  for (const auto& [n, r] : ranks_) {
    if (!r.reported) return false;
  }
  return true;
}
}  // namespace hvdrun::launcher::agent_detail

namespace hvdrun::launcher {

using agent_detail::Agent;

int run_agent(int in_fd, int out_fd) { return run_agent(in_fd, out_fd, nullptr); }

int run_agent(int in_fd, int out_fd, JobVerdict* verdict) {
  // The agent's own diagnostics go to its stderr; the launcher shows them (local) or the
  // SSH channel carries them (remote).
  Agent agent(in_fd, out_fd);
  const auto take_verdict = [&] {
    if (verdict == nullptr || !agent.job_end()) return;
    const proto::JobEnd& end = *agent.job_end();
    *verdict = JobVerdict{true, end.exit_code, end.message, end.this_host};
  };
  try {
    const int code = agent.run();
    take_verdict();
    return code;
  } catch (const std::exception& e) {
    // Report to the launcher when the stream still works, then make sure no rank survives.
    // The launcher prints the fatal frame; say it here only when it cannot arrive.
    if (!agent.report_fatal(std::string("agent on ") + agent_detail::host_name() + ": " +
                            e.what())) {
      spdlog::error("{}", e.what());
    }
    return exit_status::kAgentFailed;  // ~Agent kills every rank group
  }
}

}  // namespace hvdrun::launcher
