// The job's failures (job_state.h): a rank that failed and the rule that blames the rank
// that failed first, a lost host, an interrupt, a frozen launcher, the start deadline, and
// the teardown they begin (Kill frames to every agent).
#include <signal.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/exit_status.h"
#include "common/fd.h"
#include "common/peer_loss.h"
#include "common/plural.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/job/job_state.h"
#include "launcher/process/subprocess.h"

namespace hvdrun::launcher::job_detail {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return s + ", ... (" + std::to_string(ranks.size()) + " in all)";
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

// The reason in an agent's "cannot start rank N: <reason>", "" for any other report.
std::string start_reason(const std::string& message) {
  static constexpr std::string_view kStart = "cannot start rank ";
  const auto colon = message.find(": ");
  if (message.rfind(kStart, 0) != 0 || colon == std::string::npos) return {};
  return message.substr(colon + 2);
}

}  // namespace

// A first interrupt stops the job gracefully; a second one stops waiting for that.
bool Job::handle_interrupt() {
  const int sig = ctx_.clock->take_interrupt();
  if (sig == 0) return true;
  if (std::exchange(interrupted_, true)) {
    for (Host& h : hosts_) h.link->abort();
    return false;
  }
  decide_held_failure();  // it came first
  Failure f{exit_status::for_signal(sig),
            "hvdrun: interrupted by " + signal_text(sig) + "; stopped all ranks\n",
            {}};
  f.interrupted = true;
  decide(f);
  return true;
}

bool Job::teardown_overdue(Clock::time_point t) {
  if (!teardown_deadline_ || t < *teardown_deadline_) return false;
  spdlog::warn("ranks still running {} ms after the kill request; abandoning them to their agents",
               (ctx_.kill_grace + std::chrono::seconds(5)).count());
  return true;
}

// Silent for longer than the heartbeat timeout: this process was stopped (SIGSTOP, which it
// cannot catch) or frozen, and every agent has given up on it and stopped its ranks. Say
// so, before their reports arrive, rather than blame the ranks that were killed.
void Job::check_frozen() {
  const auto late = now() - last_heartbeat_;
  if (ctx_.heartbeat_timeout.count() == 0 || late <= ctx_.heartbeat_timeout || stopping()) return;
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.1f s, longer than the heartbeat timeout of %g s",
                std::chrono::duration<double>(late).count(),
                static_cast<double>(ctx_.heartbeat_timeout.count()) / 1000);
  fail(exit_status::kLaunchFailed,
       std::string("hvdrun: hvdrun itself was stopped (SIGSTOP) or frozen for ") + secs +
           " (HVDRUN_HEARTBEAT_TIMEOUT), so every agent stopped its ranks; the job is over. "
           "To pause a job, use Ctrl-Z or SIGTSTP: hvdrun then stops every rank and "
           "resumes them with it\n");
}

void Job::fail(int exit_code, std::string message, std::vector<std::string> hosts) {
  // A lost host, a rank that could not start, a server that stopped: the likely reason why a
  // held rank lost its peer, so this failure is the job's.
  held_.reset();
  Failure f{exit_code, std::move(message), std::move(hosts)};
  decide(f);
}

// A failure that a generation running in process may survive.
void Job::job_failure(const Failure& f) {
  if (recover(f)) return;
  decide(f);
}

// A failure the job does not survive: the first decides the exit code; every one stops
// the job (a teardown already begun goes on).
void Job::decide(const Failure& f) {
  if (stall_failure_ && !outcome_) outcome_ = *stall_failure_;  // it came first
  stall_failure_.reset();
  if (!outcome_) outcome_ = f;
  begin_teardown();
}

void Job::begin_teardown() {
  if (teardown_deadline_) return;
  if (const auto& f = outcome_) {
    spdlog::info("stopping the job: {}", f->message.substr(0, f->message.find('\n')));
  }
  teardown_deadline_ = now() + ctx_.kill_grace + std::chrono::seconds(5);
  for (Host& h : hosts_) {
    if (h.spawned) continue;
    h.spawned = true;                    // and it never will be now
    for (int r : h.ranks) rank_done(r);  // none of its ranks was ever started
  }
  for (Host& h : hosts_) send(h, proto::Kill{static_cast<std::uint32_t>(ctx_.kill_grace.count())});
}

void Job::host_closed(Host& h, const std::string& why) {
  if (h.closed) return;
  h.closed = true;
  h.outq.clear();
  if (hooks_.host_closed) hooks_.host_closed(h.name);
  std::vector<int> lost;
  for (int r : h.ranks) {
    RankState& rs = ranks_[static_cast<std::size_t>(r)];
    if (rs.done) continue;
    if (rs.retiring) {
      // Its host left discovery: the host going away with it is no failure.
      spdlog::info("elastic: process {} on host {} left the job (the host went away)", r, h.name);
      rank_done(r);
      continue;
    }
    lost.push_back(r);
  }
  if (lost.empty()) {
    if (all_done()) decide_held_failure();
    return;
  }
  std::string how = why;
  if (how.empty()) {
    // The agent's exit status (and a remote agent's last stderr) says more than "EOF".
    std::string status = h.link->close(now() + milliseconds(500));
    how = status.empty() ? "its connection closed" : "it " + status;
  }
  for (int r : lost) rank_done(r);
  if (!stopping()) {
    held_.reset();
    // In join mode the agent is a node's own hvdrun, which the orchestrator started: name
    // that node (its rank, name and address) and where to look for why it ended.
    const bool joined = h.method == LaunchMethod::join && h.link;
    const std::string who =
        joined ? "host " + h.name + ", " + h.link->describe() + "," : "the agent on host " + h.name;
    job_failure(Failure{exit_status::kLaunchFailed,
                        "hvdrun: " + who + " ended unexpectedly (" + how + ") while rank" +
                            (lost.size() > 1 ? "s " : " ") + rank_list(lost) +
                            (lost.size() > 1 ? " were" : " was") + " running; stopped the job" +
                            (joined ? "; that node's own log (its pod's) says why it ended" : "") +
                            "\n",
                        {h.name}});
  }
}

// The job's failure is the first rank failure that was not caused by another's. A rank whose
// last stderr lines say a lost peer broke its collective (kPeerLossSentence) failed because
// of a rank that exited or was cut off first, and that rank's own report may still be on
// its way (from another host, or behind output its agent is still copying): the held
// failure decides only when no other comes within ctx_.peer_loss_wait, or when no rank is
// left to report.
void Job::on_rank_exited(Host& h, const proto::RankExited& ex) {
  owner_of(h, ex.rank, "rank-exited");
  if (ranks_[static_cast<std::size_t>(ex.rank)].done) return;
  note_exit(ex.rank, ex);
  rank_done(ex.rank);
  if (ranks_[static_cast<std::size_t>(ex.rank)].rank < 0) {
    // Left out of the current generation (its host is excluded, or left discovery): stopped
    // as asked, or ended at its commit; not blamed either way.
    if (ranks_[static_cast<std::size_t>(ex.rank)].retiring)
      spdlog::log(ex.signaled || ex.value != 0 ? spdlog::level::warn : spdlog::level::info,
                  "elastic: process {} on host {} left the job ({})", ex.rank, h.name,
                  ex.signaled ? "killed by " + signal_text(ex.value)
                              : "exit code " + std::to_string(ex.value));
    spdlog::debug("process {} on host {}, left out of generation {}, ended", ex.rank, h.name,
                  generation_);
    if (all_done()) decide_held_failure();
    return;
  }
  const bool clean = !ex.signaled && ex.value == 0;
  if (clean || stopping()) {
    if (clean && !finished_ && !stopping() && hooks_.reform) {
      finished_ = true;
      spdlog::info(
          "rank {} on host {} finished (exit code 0): the job no longer grows or "
          "re-forms; it ends when the other ranks end",
          ranks_[static_cast<std::size_t>(ex.rank)].rank, h.name);
    }
    if (all_done()) decide_held_failure();
    return;
  }
  const auto tail = ex.stderr_tail.empty() ? relay_->stderr_tail(ex.rank) : ex.stderr_tail;
  if (mentions_peer_loss(tail) && ctx_.peer_loss_wait.count() > 0) {
    if (!held_) {
      held_ = HeldFailure{h.index, ex, now() + ctx_.peer_loss_wait};
      held_->exit.stderr_tail = tail;
      spdlog::debug(
          "rank {} on host {} failed because a peer was lost; waiting up to {} ms for "
          "the rank that failed first",
          ex.rank, h.name, ctx_.peer_loss_wait.count());
    }
    if (all_done()) decide_held_failure();
    return;
  }
  if (stall_ended(h, ex, tail)) return;
  held_.reset();  // this one came first: the held rank failed because of it
  // In process the others are not stopped (unless the re-formation is refused).
  job_failure(rank_failure(h, ex, in_process_ ? 0 : running_ranks()));
}

// The held failure becomes the job's: nothing else came.
void Job::decide_held_failure() {
  if (!held_) return;
  const HeldFailure held = std::move(*held_);
  held_.reset();
  job_failure(rank_failure(hosts_[static_cast<std::size_t>(held.host)], held.exit,
                           in_process_ ? 0 : running_ranks()));
}

// The failure of rank `ex.rank`, with `others` ranks still running.
Failure Job::rank_failure(const Host& h, const proto::RankExited& ex, int others) {
  std::string msg = stopped_ranks_text() + "hvdrun: rank " + std::to_string(ex.rank) + " on host " +
                    h.name +
                    (ex.signaled ? " was killed by " + signal_text(ex.value)
                                 : " exited with code " + std::to_string(ex.value));
  if (others > 0) {
    msg +=
        "; stopped the other " + std::to_string(others) + " running rank" + (others > 1 ? "s" : "");
  }
  msg += "\n";
  auto tail = ex.stderr_tail.empty() ? relay_->stderr_tail(ex.rank) : ex.stderr_tail;
  if (!ex.traceback.empty()) {
    // Its error file's traceback says more than the stderr tail, which repeats its end.
    msg += "hvdrun: rank " + std::to_string(ex.rank) +
           " raised an exception; its traceback (from its error file, TORCHELASTIC_ERROR_FILE):\n";
    std::size_t at = 0;
    while (at < ex.traceback.size()) {
      const std::size_t end = std::min(ex.traceback.find('\n', at), ex.traceback.size());
      msg += "    " + ex.traceback.substr(at, end - at) + "\n";
      at = end + 1;
    }
  } else if (tail.empty()) {
    msg += "hvdrun: rank " + std::to_string(ex.rank) + " wrote nothing to stderr\n";
  } else {
    msg += "hvdrun: last lines rank " + std::to_string(ex.rank) + " wrote to stderr:\n";
    for (const auto& line : tail) msg += "    " + line + "\n";
  }
  Failure f{ex.signaled ? exit_status::for_signal(ex.value) : ex.value, std::move(msg), {h.name}};
  f.rank_failed = true;
  return f;
}

// Ranks somebody stopped (SIGSTOP): the likely reason why the others gave up waiting, so a
// failure message names them first, as stopped.
std::string Job::stopped_ranks_text() {
  std::string out;
  for (std::size_t r = 0; r < ranks_.size(); ++r) {
    const RankState& rs = ranks_[r];
    if (rs.done || rs.stop_signal == 0) continue;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f",
                  std::chrono::duration<double>(now() - rs.stopped_at).count());
    out += "hvdrun: rank " + std::to_string(r) + " on host " +
           hosts_[static_cast<std::size_t>(rs.host)].name + " is stopped (by " +
           signal_text(rs.stop_signal) + ", " + secs +
           " s ago) and holds up the others; continue it with SIGCONT, or find who stopped "
           "it\n";
  }
  return out;
}

void Job::on_fatal(Host& h, const proto::Fatal& f) {
  if (f.rank >= 0) {
    owner_of(h, f.rank, "fatal");
    rank_done(f.rank);
  }
  if (!stopping()) {
    fail(exit_status::kLaunchFailed, "hvdrun: host " + h.name + ": " + f.message + "\n", {h.name});
    if (stopping()) {  // this report decided the job
      start_failure_host_ = h.name;
      start_failure_reason_ = start_reason(f.message);
    }
  } else if (repeats_outcome(h, f.message)) {
    // Every rank of a missing program fails the same way: the verdict says it once.
    spdlog::debug("host {}: {}", h.name, f.message);
  } else {
    spdlog::warn("host {}: {}", h.name, f.message);
  }
}

// Whether `message` gives the same host and reason as the start failure that decided the
// job, for another rank.
bool Job::repeats_outcome(const Host& h, const std::string& message) const {
  return !start_failure_reason_.empty() && h.name == start_failure_host_ &&
         start_reason(message) == start_failure_reason_;
}

// How a rank ended, as its agent reported it, for --result-file.
void Job::note_exit(int rank, const proto::RankExited& ex) {
  RankState& rs = ranks_[static_cast<std::size_t>(rank)];
  rs.exited = true;
  rs.signaled = ex.signaled;
  rs.value = ex.value;
  rs.traceback = ex.traceback;
  if (rs.cause == nullptr)
    rs.cause = !ex.signaled && ex.value == 0 ? "exited" : stopping() ? "stopped" : "failed";
}

// --timeout: the job has run its time. Torn down like a failure, but final (an elastic job
// does not restart) and with its own exit code; first the ranks' stacks are gathered and
// printed (a few seconds at most), so that a hung job says where it hangs.
void Job::check_timeout(Clock::time_point t) {
  if (!timeout_deadline_ || stopping() || t < *timeout_deadline_) return;
  decide_held_failure();  // a failure that came before the time ran out is the verdict
  if (stopping() || !report_stacks_before_teardown()) return;
  const int running = running_ranks();
  Failure f{exit_status::kTimedOut,
            "hvdrun: the job ran past --timeout " + std::to_string(*opt_.timeout_s) +
                " s; stopped " + (running > 0 ? counted(running, "running rank") : "it") +
                " (exit code " + std::to_string(exit_status::kTimedOut) +
                "). If the job is only slow, give a larger --timeout; if it hangs, the "
                "report above shows where each rank was (docs/diagnosis.md)\n",
            {}};
  f.timed_out = true;
  f.final = true;
  decide(f);
}

void Job::check_start_deadline(Clock::time_point t) {
  if (!stopping() && started_ranks_ < workers() && t >= start_deadline_) {
    std::string where;
    std::vector<std::string> late;
    for (Host& h : hosts_) {
      int want = static_cast<int>(h.ranks.size());
      if (h.started >= want) continue;
      late.push_back(h.name);
      if (!h.hello && !h.closed) {
        // A silent agent will not act on a kill request either.
        h.link->abort();
        h.closed = true;
        for (int r : h.ranks) rank_done(r);
      }
      where += "\n    host " + h.name + ": " +
               (h.hello ? std::to_string(h.started) + " of " + counted(want, "rank") + " started"
                        : std::string("its agent did not answer"));
    }
    fail(exit_status::kLaunchFailed,
         "hvdrun: the ranks did not all start within --start-timeout " +
             std::to_string(opt_.start_timeout_s) + " s; stopped the job:" + where + "\n",
         std::move(late));
  }
}

}  // namespace hvdrun::launcher::job_detail
