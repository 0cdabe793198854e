// run_job: the launcher's single supervision loop over every agent link (ppoll, with
// SIGINT/SIGTERM/SIGHUP blocked except inside the wait), the first-failure rule, and a
// teardown that runs on every path: Kill frames to every agent (SIGTERM, grace, SIGKILL
// there), then closing the links, then reaping. Nothing is left running: an agent whose
// link closes kills its ranks, and every rank dies with its agent (PR_SET_PDEATHSIG).
#include "launcher/job.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/env_names.h"
#include "common/error.h"
#include "common/thread_failure.h"
#include "compat/horovod_http_server.h"
#include "launcher/launch_plan.h"
#include "launcher/agent_protocol.h"
#include "launcher/local_host.h"
#include "launcher/output_relay.h"
#include "launcher/rank_env.h"
#include "launcher/subprocess.h"

#include "rendezvous/server.h"

extern char** environ;

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (end == v || *end || d < 0) {
    throw UsageError(std::string(name) + "='" + v + "' is not a number of seconds; expected e.g. " +
                     name + "=30");
  }
  return d;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return s + ", ... (" + std::to_string(ranks.size()) + " in all)";
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

struct Host {
  int index = 0;
  std::string name;
  bool local = true;
  LaunchMethod method = LaunchMethod::local;
  std::unique_ptr<AgentLink> link;
  proto::Decoder decoder;
  ByteQueue outq;
  bool hello = false;
  bool spawned = false;  // its spawn frames are queued (or it will never get any)
  bool closed = false;   // no more frames will come
  std::vector<int> ranks;
  int started = 0;
  Clock::time_point last_rx;
  proto::AgentHello info;
  EnvList base_env;
};

struct RankState {
  int host = 0;
  bool started = false;
  bool done = false;
};

struct Failure {
  int exit_code = 0;
  std::string message;
};

class Job {
 public:
  Job(const LaunchPlan& plan, const LaunchOptions& opt, const JobHooks& hooks)
      : opt_(opt), hooks_(hooks), plan_(plan), placement_(plan.placement) {}

  int run();

 private:
  void start_agents();
  void send(Host& h, const proto::Message& m);
  void send_spawns(Host& h);
  void service(Host& h, bool read = true);
  void handle(Host& h, proto::Message& m);
  Host* owner_of(Host& h, int rank, const char* what);
  void rank_done(int rank);
  void host_closed(Host& h, const std::string& why);
  void fail(int exit_code, std::string message);
  void check_timers(Clock::time_point now);
  void watch(std::string what, const ThreadFailure& failure);
  void check_servers();
  int running_ranks() const;
  bool all_done() const { return done_ranks_ == placement_.size(); }
  // hvdrun's own stdout/stderr cannot keep up: stop reading agents (ranks then block on
  // their pipes) until it drains.
  bool output_backed_up() const { return relay_->backlog() > kMaxOutputBacklog; }
  static constexpr std::size_t kMaxOutputBacklog = 16u << 20;
  int finish();

  const LaunchOptions& opt_;
  const JobHooks& hooks_;
  const LaunchPlan& plan_;
  const hostfile::Placement& placement_;
  std::vector<Host> hosts_;
  std::vector<RankState> ranks_;
  std::optional<OutputRelay> relay_;
  JobEnv job_env_;
  std::string cwd_;
  milliseconds grace_{3000};
  milliseconds hb_interval_{1000};
  milliseconds hb_timeout_{30000};
  Clock::time_point start_time_;
  Clock::time_point start_deadline_;
  Clock::time_point next_heartbeat_;
  std::optional<Clock::time_point> teardown_deadline_;
  int started_ranks_ = 0;
  int done_ranks_ = 0;
  std::optional<Failure> failure_;
  // The servers' I/O threads: an error there ends the job with its cause.
  struct Watched {
    std::string what;
    const ThreadFailure* failure;
    bool reported;
  };
  std::vector<Watched> watched_;
};

void Job::watch(std::string what, const ThreadFailure& failure) {
  watched_.push_back(Watched{std::move(what), &failure, false});
}

void Job::check_servers() {
  for (Watched& w : watched_) {
    if (w.reported || !w.failure->failed()) continue;
    w.reported = true;  // and its descriptor is no longer polled
    fail(255, "hvdrun: the " + w.what + " failed: " + describe(w.failure->get()) +
                  "; stopped the job\n");
  }
}

void Job::send(Host& h, const proto::Message& m) {
  if (!h.closed) proto::encode(m, h.outq);
}

void Job::start_agents() {
  proto::Hello hello;
  hello.heartbeat_interval_ms = static_cast<std::uint32_t>(hb_interval_.count());
  hello.kill_grace_ms = static_cast<std::uint32_t>(grace_.count());
  hello.log_level = opt_.verbose ? "debug" : opt_.log_level;
  for (Host& h : hosts_) {
    if (h.local) {
      h.link = start_local_agent(hooks_.agent_exe);
    } else if (hooks_.remote_link) {
      h.link = hooks_.remote_link(h.name);
    } else {
      throw LaunchError("host '" + h.name + "' is reached over " + std::string(to_string(h.method)) +
                        ", but no link was opened to it");
    }
    h.last_rx = Clock::now();
    spdlog::debug("host {}: {}", h.name, h.link->describe());
  }
  // This machine as the other hosts reach it: the interface of its ranks in a job with
  // remote hosts (not loopback, which the others cannot reach).
  std::string outward = "127.0.0.1";
  for (const Host& h : hosts_) {
    if (!h.local) {
      outward = h.link->launcher_address();
      break;
    }
  }
  for (Host& h : hosts_) {
    // A local agent needs no silence limit: its stdin reaches EOF whenever the launcher
    // dies. A remote one must notice a launcher that is gone but whose connection is not.
    hello.heartbeat_timeout_ms = h.local ? 0 : static_cast<std::uint32_t>(hb_timeout_.count());
    // Each agent names its own host's interface toward the launcher, unless the user chose
    // one with --network-interface.
    hello.launcher_addr.clear();
    if (opt_.network_interface.empty())
      hello.launcher_addr = h.local ? outward : h.link->launcher_address();
    send(h, hello);
  }
}

// Host h's spawn frames, once both h's agent (its interface) and the agent of rank 0's host
// (its free port, MASTER_PORT) have said hello.
void Job::send_spawns(Host& h) {
  h.spawned = true;
  const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
  JobEnv env = job_env_;
  env.master_port = first.info.free_port;
  if (opt_.network_interface.empty()) env.rendezvous_addr = h.link->launcher_address();
  env.host_interface = h.info.iface;
  // Rank 0's host as this host reaches it.
  env.master_addr = first.local ? (h.local ? "127.0.0.1" : h.link->launcher_address())
                                : first.link->host_address();
  for (int r : h.ranks) {
    proto::Spawn s;
    s.rank = r;
    s.argv = opt_.command;
    s.cwd = cwd_;
    s.env =
        rank_env(h.base_env, placement_.ranks[static_cast<std::size_t>(r)], h.name, env).entries();
    send(h, s);
  }
}

Host* Job::owner_of(Host& h, int rank, const char* what) {
  if (rank < 0 || rank >= placement_.size() ||
      ranks_[static_cast<std::size_t>(rank)].host != h.index) {
    throw proto::ProtocolError(std::string("agent protocol: ") + what + " for rank " +
                               std::to_string(rank) + ", which does not run on this host");
  }
  return &h;
}

void Job::rank_done(int rank) {
  RankState& rs = ranks_[static_cast<std::size_t>(rank)];
  if (rs.done) return;
  rs.done = true;
  ++done_ranks_;
  relay_->end_rank(rank);
}

int Job::running_ranks() const {
  int n = 0;
  for (const auto& r : ranks_) n += r.done ? 0 : 1;
  return n;
}

void Job::fail(int exit_code, std::string message) {
  if (!failure_) {
    failure_ = Failure{exit_code, std::move(message)};
    spdlog::info("stopping the job: {}", failure_->message.substr(0, failure_->message.find('\n')));
  }
  if (teardown_deadline_) return;
  teardown_deadline_ = Clock::now() + grace_ + std::chrono::seconds(5);
  for (Host& h : hosts_) {
    if (h.spawned) continue;
    h.spawned = true;                    // and it never will be now
    for (int r : h.ranks) rank_done(r);  // none of its ranks was ever started
  }
  for (Host& h : hosts_) send(h, proto::Kill{static_cast<std::uint32_t>(grace_.count())});
}

void Job::host_closed(Host& h, const std::string& why) {
  if (h.closed) return;
  h.closed = true;
  h.outq.clear();
  std::vector<int> lost;
  for (int r : h.ranks) {
    if (!ranks_[static_cast<std::size_t>(r)].done) lost.push_back(r);
  }
  if (lost.empty()) return;
  std::string how = why;
  if (how.empty()) {
    // The agent's exit status (and a remote agent's last stderr) says more than "EOF".
    std::string status = h.link->close(Clock::now() + milliseconds(500));
    how = status.empty() ? "its connection closed" : "it " + status;
  }
  for (int r : lost) rank_done(r);
  if (!teardown_deadline_) {
    fail(255, "hvdrun: the agent on host " + h.name + " ended unexpectedly (" + how +
                  ") while rank" + (lost.size() > 1 ? "s " : " ") + rank_list(lost) +
                  (lost.size() > 1 ? " were" : " was") + " running; stopped the job\n");
  }
}

void Job::handle(Host& h, proto::Message& m) {
  if (auto* o = std::get_if<proto::Output>(&m)) {
    owner_of(h, o->rank, "output");
    relay_->add(o->rank, o->stream, o->data);
  } else if (std::holds_alternative<proto::Heartbeat>(m)) {
  } else if (auto* hello = std::get_if<proto::AgentHello>(&m)) {
    if (hello->version != proto::kVersion) {
      throw proto::ProtocolError("the agent speaks agent protocol version " +
                                 std::to_string(hello->version) + " but this hvdrun speaks " +
                                 std::to_string(proto::kVersion) +
                                 "; install the same hvdrun version on every host");
    }
    h.hello = true;
    h.info = *hello;
    spdlog::debug(
        "host {}: agent pid {} on {} ready after {} ms; interface toward the launcher: '{}'",
        h.name, hello->pid, hello->hostname,
        std::chrono::duration_cast<milliseconds>(Clock::now() - start_time_).count(), hello->iface);
    const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
    if (!teardown_deadline_ && first.hello) {
      for (Host& other : hosts_) {
        if (other.hello && !other.spawned && !other.closed) send_spawns(other);
      }
    }
  } else if (auto* st = std::get_if<proto::RankStarted>(&m)) {
    owner_of(h, st->rank, "rank-started");
    RankState& rs = ranks_[static_cast<std::size_t>(st->rank)];
    if (!rs.started) {
      rs.started = true;
      ++h.started;
      if (++started_ranks_ == placement_.size()) {
        spdlog::info("all {} ranks started in {} ms", started_ranks_,
                     std::chrono::duration_cast<milliseconds>(Clock::now() - start_time_).count());
      }
    }
  } else if (auto* ex = std::get_if<proto::RankExited>(&m)) {
    owner_of(h, ex->rank, "rank-exited");
    if (ranks_[static_cast<std::size_t>(ex->rank)].done) return;
    int others = running_ranks() - 1;
    rank_done(ex->rank);
    if ((ex->signaled || ex->value != 0) && !teardown_deadline_) {
      std::string msg = "hvdrun: rank " + std::to_string(ex->rank) + " on host " + h.name +
                        (ex->signaled ? " was killed by " + signal_text(ex->value)
                                      : " exited with code " + std::to_string(ex->value));
      if (others > 0) {
        msg += "; stopped the other " + std::to_string(others) + " running rank" +
               (others > 1 ? "s" : "");
      }
      msg += "\n";
      auto tail = ex->stderr_tail.empty() ? relay_->stderr_tail(ex->rank) : ex->stderr_tail;
      if (tail.empty()) {
        msg += "hvdrun: rank " + std::to_string(ex->rank) + " wrote nothing to stderr\n";
      } else {
        msg += "hvdrun: last lines rank " + std::to_string(ex->rank) + " wrote to stderr:\n";
        for (const auto& line : tail) msg += "    " + line + "\n";
      }
      fail(ex->signaled ? 128 + ex->value : ex->value, std::move(msg));
    }
  } else if (auto* f = std::get_if<proto::Fatal>(&m)) {
    if (f->rank >= 0) {
      owner_of(h, f->rank, "fatal");
      rank_done(f->rank);
    }
    if (!teardown_deadline_) {
      fail(255, "hvdrun: host " + h.name + ": " + f->message + "\n");
    } else {
      spdlog::warn("host {}: {}", h.name, f->message);
    }
  } else {
    throw proto::ProtocolError(std::string("agent protocol: unexpected ") + proto::type_name(m) +
                               " frame from the agent");
  }
}

void Job::service(Host& h, bool read) {
  if (h.closed) return;
  try {
    while (!h.outq.empty()) {
      IoResult w = h.link->write(h.outq.data(), h.outq.size());
      if (w.kind == IoResult::ok) {
        h.outq.consume(w.bytes);
      } else if (w.kind == IoResult::would_block) {
        break;
      } else {
        // A local agent's exit status says more than the broken pipe does.
        host_closed(h, h.local ? std::string() : w.message);
        return;
      }
    }
    constexpr std::size_t kChunk = 1u << 20;
    std::size_t budget = 8u << 20;  // then let the other hosts have a turn
    while (read && budget > 0 && !output_backed_up()) {
      IoResult r = h.link->read(h.decoder.prepare(kChunk), kChunk);
      if (r.kind == IoResult::would_block) break;
      if (r.kind != IoResult::ok) {
        host_closed(h, r.kind == IoResult::eof ? std::string() : r.message);
        return;
      }
      h.decoder.commit(r.bytes);
      h.last_rx = Clock::now();
      budget -= std::min(budget, r.bytes);
      while (auto m = h.decoder.next()) {
        handle(h, *m);
        if (h.closed) return;
      }
    }
  } catch (const proto::ProtocolError& e) {
    h.link->abort();
    host_closed(h, e.what());
  }
}

void Job::check_timers(Clock::time_point now) {
  if (now >= next_heartbeat_) {
    for (Host& h : hosts_) send(h, proto::Heartbeat{});
    next_heartbeat_ = now + hb_interval_;
  }
  if (hb_timeout_.count() > 0) {
    for (Host& h : hosts_) {
      if (!h.closed && now - h.last_rx > hb_timeout_) {
        h.link->abort();
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", static_cast<double>(hb_timeout_.count()) / 1000);
        host_closed(h, std::string("nothing heard from it for ") + secs +
                           " s: the host, the agent or the connection hangs");
      }
    }
  }
  if (!teardown_deadline_ && started_ranks_ < placement_.size() && now >= start_deadline_) {
    std::string where;
    for (Host& h : hosts_) {
      int want = static_cast<int>(h.ranks.size());
      if (h.started >= want) continue;
      if (!h.hello && !h.closed) {
        // A silent agent will not act on a kill request either.
        h.link->abort();
        h.closed = true;
        for (int r : h.ranks) rank_done(r);
      }
      where += "\n    host " + h.name + ": " +
               (h.hello ? std::to_string(h.started) + " of " + std::to_string(want) + " ranks started"
                        : std::string("its agent did not answer"));
    }
    fail(255, "hvdrun: the ranks did not all start within --start-timeout " +
                  std::to_string(opt_.start_timeout_s) + " s; stopped the job:" + where + "\n");
  }
}

int Job::finish() {
  for (int r = 0; r < placement_.size(); ++r) relay_->end_rank(r);
  relay_->drain();
  for (Host& h : hosts_) {
    if (h.link) h.link->close_write();
  }
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (Host& h : hosts_) {
    if (!h.link) continue;
    std::string how = h.link->close(deadline);
    spdlog::debug("host {}: agent {}", h.name, how);
  }
  if (failure_) {
    std::fputs(failure_->message.c_str(), stderr);
    std::fflush(stderr);
    return failure_->exit_code;
  }
  return 0;
}

int Job::run() {
  start_time_ = Clock::now();
  grace_ = milliseconds(static_cast<long>(env_seconds(env_names::kKillGrace, 3.0) * 1000));
  hb_timeout_ = milliseconds(static_cast<long>(env_seconds(env_names::kHeartbeatTimeout, 30.0) * 1000));
  hb_interval_ = std::max(milliseconds(10), std::min(milliseconds(1000), hb_timeout_ / 4));
  if (hb_timeout_.count() == 0) hb_interval_ = milliseconds(1000);
  if (opt_.command.empty()) {
    throw UsageError("no command to run; expected e.g. hvdrun -np 4 python train.py");
  }

  const int size = placement_.size();
  ranks_.resize(static_cast<std::size_t>(size));
  const bool all_local = plan_.all_local();
  for (std::size_t i = 0; i < plan_.hosts.size(); ++i) {
    const PlannedHost& planned = plan_.hosts[i];
    Host h;
    h.index = static_cast<int>(i);
    h.name = planned.name;
    h.local = planned.local;
    h.method = planned.method;
    h.ranks = planned.ranks;
    for (int r : h.ranks) ranks_[static_cast<std::size_t>(r)].host = h.index;
    h.base_env = host_base_env(environ, h.local, opt_.env);
    hosts_.push_back(std::move(h));
  }

  job_env_.size = size;
  job_env_.start_timeout_s = opt_.start_timeout_s;
  job_env_.network_interface = opt_.network_interface;
  std::string bind_addr = all_local ? "127.0.0.1" : "0.0.0.0";
  if (!opt_.network_interface.empty()) {
    job_env_.rendezvous_addr = interface_address(opt_.network_interface);
    bind_addr = job_env_.rendezvous_addr;
  }
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) throw_errno("finding the working directory", "getcwd");
  cwd_ = cwd;

  if (!opt_.output_filename.empty()) {
    // A directory that cannot be made is bad input: report it before anything starts.
    try {
      OutputRelay::make_rank_dirs(opt_.output_filename, size);
    } catch (const SystemError& e) {
      throw UsageError(std::string(e.what()) + "; give --output-filename a directory you can write to");
    }
  }

  // Before any thread starts, so that every thread inherits the block.
  SignalMask signals({SIGINT, SIGTERM, SIGHUP});
  // Agents first, while this process is still single-threaded: a local agent is then a
  // plain fork that needs no exec.
  start_agents();

  RelayOptions ro;
  ro.timestamp = opt_.prefix_timestamp;
  ro.output_dir = opt_.output_filename;
  relay_.emplace(ro, size);
  job_env_.secret = rendezvous::generate_secret();
  rendezvous::Server server(job_env_.secret, bind_addr, 0);
  server.start();
  job_env_.rendezvous_port = server.port();
  watch("rendezvous server", server.failure());
  if (hooks_.on_rendezvous) hooks_.on_rendezvous(server);
  // Horovod's own gloo-mode rendezvous (HTTP), for unmodified Horovod programs. Its
  // protocol has no secret: beyond loopback it admits only the job's hosts.
  compat::HorovodHttpServer horovod(placement_, bind_addr, 0);
  if (!all_local) {
    std::vector<std::string> allowed = {"127.0.0.1", "::1"};
    for (const Host& h : hosts_) allowed.push_back(h.link->host_address());
    horovod.allow_only(allowed);
  }
  horovod.start();
  watch("Horovod rendezvous server", horovod.failure());
  job_env_.horovod_port = horovod.port();
  job_env_.num_hosts = static_cast<int>(hosts_.size());
  spdlog::debug("rendezvous on {}:{}, Horovod rendezvous on port {}", bind_addr,
                job_env_.rendezvous_port, job_env_.horovod_port);

  // One deadline for the whole start: it began with the preflight when there was one.
  start_deadline_ =
      hooks_.launch_start.value_or(start_time_) + std::chrono::seconds(opt_.start_timeout_s);
  next_heartbeat_ = Clock::now() + hb_interval_;
  bool interrupted = false;
  std::vector<pollfd> fds;
  try {
    for (;;) {
      if (signals.take(SIGINT) + signals.take(SIGTERM) + signals.take(SIGHUP) > 0) {
        const bool again = std::exchange(interrupted, true);
        const int sig = SignalMask::last();
        if (again) {
          // A second interrupt: stop waiting for a graceful end.
          for (Host& h : hosts_) h.link->abort();
          break;
        }
        fail(128 + sig, "hvdrun: interrupted by " + signal_text(sig) + "; stopped all ranks\n");
      }
      if (all_done()) break;
      auto now = Clock::now();
      if (teardown_deadline_ && now >= *teardown_deadline_) {
        spdlog::warn("ranks still running {} ms after the kill request; abandoning them to their agents",
                     (grace_ + std::chrono::seconds(5)).count());
        break;
      }
      // Write what is queued before waiting: an SSH link polls for input only (output
      // waits on the peer's window), and an agent says nothing before the launcher's hello.
      for (Host& h : hosts_) {
        if (!h.outq.empty()) service(h, /*read=*/false);
      }
      fds.clear();
      bool paused = output_backed_up();
      for (Host& h : hosts_) {
        if (h.closed) continue;
        h.link->add_pollfds(fds, !paused, !h.outq.empty());
        // Agents are not expected to get through while we do not read them.
        if (paused) h.last_rx = now;
      }
      for (const Watched& w : watched_) {
        if (!w.reported) fds.push_back({w.failure->fd(), POLLIN, 0});
      }
      auto wake = next_heartbeat_;
      if (paused) wake = std::min(wake, now + milliseconds(5));
      if (!teardown_deadline_ && started_ranks_ < size) wake = std::min(wake, start_deadline_);
      if (teardown_deadline_) wake = std::min(wake, *teardown_deadline_);
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now);
      if (left.count() < 0) left = {};
      timespec ts{static_cast<time_t>(left.count() / 1000000000),
                  static_cast<long>(left.count() % 1000000000)};
      int rc = ::ppoll(fds.data(), fds.size(), &ts, signals.wait_mask());
      if (rc < 0 && errno != EINTR) throw_errno("launcher main loop", "ppoll");
      if (rc > 0) {
        for (Host& h : hosts_) service(h);
        relay_->flush();
      }
      check_servers();
      check_timers(Clock::now());
      for (Host& h : hosts_) service(h, /*read=*/false);  // send what the timers queued
    }
  } catch (...) {
    // Tear down before the error leaves: the links' destructors end every agent.
    for (Host& h : hosts_) {
      if (h.link) h.link->close_write();
    }
    relay_->flush();
    throw;
  }
  return finish();
}

}  // namespace

int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks) {
  Job job(plan, options, hooks);
  return job.run();
}

int run_job(const LaunchOptions& options, const JobHooks& hooks) {
  return run_job(make_plan(options), options, hooks);
}

}  // namespace hvdrun::launcher
