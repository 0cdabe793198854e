// run_job: the launcher's single supervision loop over every agent link, written as the
// steps of a launch (lay out the hosts, start the agents, the output relay and the
// servers, supervise, finish). Time, waiting, output and the failure rule come through
// the JobContext. Teardown runs on every path: Kill frames to every agent (SIGTERM,
// grace, SIGKILL there), then closing the links, then reaping. Nothing is left running: an
// agent whose link closes kills its ranks, and every rank dies with its agent
// (PR_SET_PDEATHSIG).
#include "launcher/job.h"

#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "common/peer_loss.h"
#include "common/plural.h"
#include "common/thread_failure.h"
#include "compat/horovod_http_server.h"
#include "launcher/agent_protocol.h"
#include "launcher/launch_plan.h"
#include "launcher/local_host.h"
#include "launcher/output_files.h"
#include "launcher/output_relay.h"
#include "launcher/rank_env.h"
#include "launcher/subprocess.h"
#include "rendezvous/server.h"

namespace hvdrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) return s + ", ... (" + std::to_string(ranks.size()) + " in all)";
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

// What the ranks of one kind of host (EnvSource) get besides the per-rank contract.
struct HostEnv {
  EnvList base;                             // the launcher's forwarded part and -x
  std::vector<std::string> host_variables;  // of the agent's own, the ones ranks start from
  EnvList defaults;                         // where nothing else sets them
};

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
  const HostEnv* env = nullptr;  // Job::host_envs_: one per EnvSource, not per host
  // Bytes asked of the link per read: small for a quiet host (the launcher holds one buffer
  // per host), doubled while reads fill it, up to kMaxReadChunk.
  std::size_t read_chunk = kMinReadChunk;
  static constexpr std::size_t kMinReadChunk = 4u << 10;
  static constexpr std::size_t kMaxReadChunk = 1u << 20;
};

// One process the agents run for the job, by the number its agent knows it by (its rank in
// the generation it was started in). In process, a process keeps its number while its rank
// changes with the generations; a replacement reuses the number of a process that ended on
// the same host.
struct RankState {
  int host = 0;
  int rank = -1;      // its rank in the current generation; -1: not in it (being stopped)
  int declared = -1;  // the newest generation it declared the elastic API in
  bool started = false;
  bool done = false;
  int stop_signal = 0;  // stopped by this signal (not by a suspend), or 0
  Clock::time_point stopped_at;
};

class Job {
 public:
  Job(const LaunchPlan& plan, const LaunchOptions& opt, const JobHooks& hooks, JobContext& ctx)
      : opt_(opt), hooks_(hooks), ctx_(ctx), plan_(plan), placement_(plan.placement) {}

  int run();

 private:
  // The steps of run(), in order.
  void check_command() const;
  void lay_out_hosts();
  std::string prepare_job_env();
  void prepare_output_dirs();
  void start_agents();
  void start_relay();
  void start_servers(const std::string& bind_addr);
  void supervise();
  int finish();

  // One turn of the supervision loop; false when the job is over.
  bool turn();
  bool handle_interrupt();
  void suspend();
  void flush_links(Clock::time_point deadline);
  void check_frozen();
  std::string stopped_ranks_text();
  bool teardown_overdue(Clock::time_point t);
  void wait_for_events(Clock::time_point t);

  std::unique_ptr<AgentLink> open_link(const Host& h);
  void send(Host& h, const proto::Message& m);
  void send_spawns(Host& h);
  void service(Host& h, bool read = true);
  void handle(Host& h, proto::Message& m);
  void on_agent_hello(Host& h, const proto::AgentHello& hello);
  void admit_interface(const Host& h, const std::vector<std::string>& addrs);
  void on_rank_started(Host& h, const proto::RankStarted& st);
  void on_rank_exited(Host& h, const proto::RankExited& ex);
  Failure rank_failure(const Host& h, const proto::RankExited& ex, int others);
  void decide_held_failure();
  void on_fatal(Host& h, const proto::Fatal& f);
  void on_rank_stopped(Host& h, const proto::RankStopped& stop);
  Host* owner_of(Host& h, int rank, const char* what);
  void rank_done(int rank);
  // In-process elastic recovery (docs/elastic.md).
  void on_rank_elastic(Host& h, const proto::RankElastic& e);
  void on_rank_left(Host& h, const proto::RankLeft& l);
  void job_failure(const Failure& f);
  bool recover(const Failure& f);
  bool reform(const JobHooks::Reform& how, const Failure& f, bool blamed);
  void place_members(const std::vector<int>& members);
  void start_generation_server();
  void spawn_rank(Host& h, int worker, const JobEnv& env);
  JobEnv host_job_env(const Host& h) const;
  bool grow(const std::vector<hostfile::HostSlots>& hosts);
  std::vector<int> growth_processes(const std::vector<hostfile::HostSlots>& hosts, int want,
                                    std::vector<std::string>& to_open) const;
  std::vector<std::string> reopen_hosts(const std::vector<std::string>& names);
  proto::Regenerate next_generation(std::string reason) const;
  void send_regenerate(const proto::Regenerate& g);
  void start_fresh(const std::vector<int>& fresh, const std::string& why);
  void send_hello(Host& h);
  void host_closed(Host& h, const std::string& why);
  void fail(int exit_code, std::string message, std::vector<std::string> hosts = {});
  void begin_teardown();
  bool stopping() const { return teardown_deadline_.has_value(); }
  void check_timers(Clock::time_point t);
  void check_start_deadline(Clock::time_point t);
  void watch(std::string what, const ThreadFailure& failure);
  void check_servers();
  int running_ranks() const;
  int workers() const { return static_cast<int>(ranks_.size()); }
  bool all_done() const { return done_ranks_ == workers(); }
  Clock::time_point now() const { return ctx_.clock->now(); }
  // hvdrun's own stdout/stderr cannot keep up: stop reading agents (ranks then block on
  // their pipes) until it drains.
  bool output_backed_up() const { return relay_->backlog() > kMaxOutputBacklog; }
  static constexpr std::size_t kMaxOutputBacklog = 16u << 20;

  const LaunchOptions& opt_;
  const JobHooks& hooks_;
  JobContext& ctx_;
  const LaunchPlan& plan_;
  hostfile::Placement placement_;  // the current generation's, indexed by rank
  std::vector<int> worker_of_;     // the process (ranks_ index) of each current rank
  std::vector<Host> hosts_;
  HostEnv host_envs_[3];  // by EnvSource
  std::vector<RankState> ranks_;
  std::vector<UniqueFd> output_files_;  // --output-filename, opened before anything starts
  std::optional<OutputRelay> relay_;
  JobEnv job_env_;
  Clock::time_point start_time_;
  Clock::time_point start_deadline_;
  Clock::time_point next_heartbeat_;
  Clock::time_point last_heartbeat_;  // when the agents last heard from this process
  std::optional<Clock::time_point> teardown_deadline_;
  // A rank that failed because a peer was lost (its stderr says so): not yet the job's
  // failure, while the rank that failed first may still report (see on_rank_exited).
  struct HeldFailure {
    int host;
    proto::RankExited exit;
    Clock::time_point until;
  };
  std::optional<HeldFailure> held_;
  bool interrupted_ = false;
  int generation_ = 0;
  bool in_process_ = false;  // every rank declared the elastic API: failures re-form
  // A rank left the current generation with no failure known to this process: a re-form
  // at the same size once this passes, unless the failure behind it arrives first.
  std::optional<Clock::time_point> left_hold_;
  static constexpr milliseconds kLeftHold{500};
  int started_ranks_ = 0;
  int done_ranks_ = 0;
  // The servers' I/O threads: an error there ends the job with its cause.
  struct Watched {
    std::string what;
    const ThreadFailure* failure;
    bool reported;
  };
  std::vector<Watched> watched_;
  std::vector<pollfd> fds_;
  std::vector<int> fd_host_;  // fds_[i] belongs to hosts_[fd_host_[i]], or -1
  std::string bind_addr_;
  std::string outward_;  // this machine as the other hosts reach it
  // Declared last, so destroyed first: the servers stop before the links end the agents.
  // One rendezvous server per generation (the current one last).
  std::vector<std::unique_ptr<rendezvous::Server>> servers_;
  std::optional<compat::HorovodHttpServer> horovod_;
};

int Job::run() {
  start_time_ = now();
  check_command();
  lay_out_hosts();
  const std::string bind_addr = prepare_job_env();
  prepare_output_dirs();
  // Agents first, while this process is still single-threaded: a local agent is then a
  // plain fork that needs no exec.
  start_agents();
  start_relay();
  start_servers(bind_addr);
  supervise();
  return finish();
}

void Job::check_command() const {
  if (opt_.command.empty()) {
    throw UsageError("no command to run; expected e.g. hvdrun -np 4 python train.py");
  }
}

// Hosts and ranks as the plan placed them, and each host's base environment.
void Job::lay_out_hosts() {
  ranks_.resize(static_cast<std::size_t>(placement_.size()));
  generation_ = opt_.generation;
  for (int r = 0; r < placement_.size(); ++r) {
    ranks_[static_cast<std::size_t>(r)].rank = r;
    worker_of_.push_back(r);
  }
  hosts_.reserve(plan_.hosts.size());
  auto source_of = [](const PlannedHost& p) {
    return p.local ? EnvSource::launcher : env_source(to_string(p.method));
  };
  for (EnvSource source : {EnvSource::launcher, EnvSource::login, EnvSource::container}) {
    if (std::none_of(plan_.hosts.begin(), plan_.hosts.end(),
                     [&](const PlannedHost& p) { return source_of(p) == source; }))
      continue;
    HostEnv& e = host_envs_[static_cast<int>(source)];
    e.base = host_base_env(ctx_.environment, source, opt_.env);
    e.host_variables = host_variables(source);
    e.defaults = host_defaults(ctx_.environment, source);
  }
  for (std::size_t i = 0; i < plan_.hosts.size(); ++i) {
    const PlannedHost& planned = plan_.hosts[i];
    Host h;
    h.index = static_cast<int>(i);
    h.name = planned.name;
    h.local = planned.local;
    h.method = planned.method;
    h.ranks = planned.ranks;
    for (int r : h.ranks) ranks_[static_cast<std::size_t>(r)].host = h.index;
    h.env = &host_envs_[static_cast<int>(source_of(planned))];
    hosts_.push_back(std::move(h));
  }
}

// The job-wide part of every rank's environment; returns the servers' bind address.
std::string Job::prepare_job_env() {
  job_env_.size = placement_.size();
  job_env_.start_timeout_s = opt_.start_timeout_s;
  job_env_.generation = opt_.generation;
  job_env_.network_interface = opt_.network_interface;
  job_env_.num_hosts = static_cast<int>(hosts_.size());
  std::string bind_addr = plan_.all_local() ? "127.0.0.1" : "0.0.0.0";
  if (!opt_.network_interface.empty()) {
    job_env_.rendezvous_addr = interface_address(opt_.network_interface);
    bind_addr = job_env_.rendezvous_addr;
  }
  return bind_addr;
}

// A directory that cannot be used safely is bad input: reported before anything starts.
void Job::prepare_output_dirs() {
  if (opt_.output_filename.empty()) return;
  output_files_ =
      open_output_files(opt_.output_filename, placement_.size(), &OutputRelay::rank_dir_name);
}

std::unique_ptr<AgentLink> Job::open_link(const Host& h) {
  if (h.local)
    return hooks_.local_link ? hooks_.local_link(h.name) : start_local_agent(hooks_.agent_exe);
  if (hooks_.remote_link) return hooks_.remote_link(h.name);
  throw LaunchError("host '" + h.name + "' is reached over " + std::string(to_string(h.method)) +
                    ", but no link was opened to it");
}

void Job::start_agents() {
  for (Host& h : hosts_) {
    h.link = open_link(h);
    h.last_rx = now();
    spdlog::debug("host {}: {}", h.name, h.link->describe());
  }
  // This machine as the other hosts reach it: the interface of its ranks in a job with
  // remote hosts (not loopback, which the others cannot reach).
  outward_ = "127.0.0.1";
  for (const Host& h : hosts_) {
    if (!h.local) {
      outward_ = h.link->launcher_address();
      break;
    }
  }
  for (Host& h : hosts_) send_hello(h);
}

void Job::send_hello(Host& h) {
  proto::Hello hello;
  hello.heartbeat_interval_ms = static_cast<std::uint32_t>(ctx_.heartbeat_interval.count());
  hello.kill_grace_ms = static_cast<std::uint32_t>(ctx_.kill_grace.count());
  hello.log_level = opt_.verbose ? "debug" : opt_.log_level;
  hello.job_id = std::to_string(::getpid());
  hello.network_interface = opt_.network_interface;
  // Every agent must notice a launcher that is gone but whose connection is not, and a
  // local one a launcher stopped by SIGSTOP: no host goes on running half a job.
  hello.heartbeat_timeout_ms = static_cast<std::uint32_t>(ctx_.heartbeat_timeout.count());
  // Each agent names its own host's interface toward the launcher, unless the user chose
  // one with --network-interface.
  if (opt_.network_interface.empty())
    hello.launcher_addr = h.local ? outward_ : h.link->launcher_address();
  send(h, hello);
}

void Job::start_relay() {
  RelayOptions ro;
  ro.timestamp = opt_.prefix_timestamp;
  ro.output_dir = opt_.output_filename;
  ro.stdout_fd = ctx_.stdout_fd;
  ro.stderr_fd = ctx_.stderr_fd;
  relay_.emplace(ro, placement_.size(), std::move(output_files_));
}

// The rendezvous server, and Horovod's own gloo-mode rendezvous (HTTP) for unmodified
// Horovod programs. Horovod's protocol has no secret: its server serves this host's
// processes of this user only (by the uid owning the caller's socket), and other hosts
// only when they are the job's: their SSH addresses, and with --network-interface that
// interface's addresses on each host, through which their ranks reach this one, as each
// agent reports them in its hello (never the interface's whole network: docs/security.md).
void Job::start_servers(const std::string& bind_addr) {
  bind_addr_ = bind_addr;
  start_generation_server();
  horovod_.emplace(placement_, bind_addr, 0);
  if (hooks_.horovod_peers) horovod_->judge_peers_with(hooks_.horovod_peers);
  std::vector<std::string> allowed;
  for (const Host& h : hosts_) {
    if (h.local) continue;
    // An exec: host whose name does not resolve here has no address to admit.
    const std::string a = h.link->host_address();
    in6_addr any{};
    if (::inet_pton(AF_INET, a.c_str(), &any) == 1 || ::inet_pton(AF_INET6, a.c_str(), &any) == 1)
      allowed.push_back(a);
  }
  if (!opt_.network_interface.empty() && !plan_.all_local()) {
    for (auto& a : interface_addresses(opt_.network_interface)) allowed.push_back(a);
  }
  horovod_->allow_only(allowed);
  horovod_->start();
  watch("Horovod rendezvous server", horovod_->failure());
  job_env_.horovod_port = horovod_->port();
  spdlog::debug("rendezvous on {}:{}, Horovod rendezvous on port {}", bind_addr,
                job_env_.rendezvous_port, job_env_.horovod_port);
}

void Job::supervise() {
  // One deadline for the whole start: it began with the preflight when there was one.
  start_deadline_ =
      hooks_.launch_start.value_or(start_time_) + std::chrono::seconds(opt_.start_timeout_s);
  next_heartbeat_ = now() + ctx_.heartbeat_interval;
  last_heartbeat_ = now();
  try {
    while (turn()) {
    }
  } catch (...) {
    // Tear down before the error leaves: the links' destructors end every agent.
    for (Host& h : hosts_) {
      if (h.link) h.link->close_write();
    }
    relay_->flush();
    throw;
  }
}

bool Job::turn() {
  if (!handle_interrupt()) return false;
  if (ctx_.clock->take_suspend()) suspend();
  if (all_done()) return false;
  const auto t = now();
  if (teardown_overdue(t)) return false;
  // Write what is queued before waiting: an SSH link polls for input only (output
  // waits on the peer's window), and an agent says nothing before the launcher's hello.
  for (Host& h : hosts_) {
    if (!h.outq.empty()) service(h, /*read=*/false);
  }
  wait_for_events(t);
  check_servers();
  check_timers(now());
  for (Host& h : hosts_) service(h, /*read=*/false);  // send what the timers queued
  return true;
}

// Ctrl-Z: every agent stops its ranks, then this process stops itself, so that the shell
// sees the job stopped; `fg` (SIGCONT) continues it, and the ranks with it. The time spent
// stopped counts toward no deadline.
void Job::suspend() {
  if (stopping()) return;  // a teardown in progress goes on
  for (Host& h : hosts_) send(h, proto::Suspend{});
  flush_links(now() + milliseconds(1000));
  relay_->drain();
  const auto before = now();
  spdlog::debug("suspended: every agent stopped its ranks");
  ctx_.clock->stop_self();
  const auto t = now();
  start_deadline_ += t - before;
  for (Host& h : hosts_) {
    send(h, proto::Resume{});
    h.last_rx = t;
  }
  last_heartbeat_ = t;  // the agents' silence limit counts from the resume
  flush_links(t + milliseconds(1000));
  spdlog::debug("resumed after {} ms",
                std::chrono::duration_cast<milliseconds>(t - before).count());
}

// Writes every host's queued frames, waiting for the links to take them until `deadline`.
void Job::flush_links(Clock::time_point deadline) {
  for (;;) {
    fds_.clear();
    for (Host& h : hosts_) {
      if (!h.outq.empty()) service(h, /*read=*/false);
      if (!h.closed && !h.outq.empty()) h.link->add_pollfds(fds_, false, true);
    }
    if (fds_.empty() || now() >= deadline) return;
    ctx_.clock->wait(fds_, std::min(deadline, now() + milliseconds(10)));
  }
}

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
  if (ctx_.policy->on_failure(f)) begin_teardown();
  return true;
}

bool Job::teardown_overdue(Clock::time_point t) {
  if (!teardown_deadline_ || t < *teardown_deadline_) return false;
  spdlog::warn("ranks still running {} ms after the kill request; abandoning them to their agents",
               (ctx_.kill_grace + std::chrono::seconds(5)).count());
  return true;
}

void Job::wait_for_events(Clock::time_point t) {
  fds_.clear();
  fd_host_.clear();
  const bool paused = output_backed_up();
  for (Host& h : hosts_) {
    if (h.closed) continue;
    h.link->add_pollfds(fds_, !paused, !h.outq.empty());
    fd_host_.resize(fds_.size(), h.index);
    // Agents are not expected to get through while we do not read them.
    if (paused) h.last_rx = t;
  }
  for (const Watched& w : watched_) {
    if (!w.reported) fds_.push_back({w.failure->fd(), POLLIN, 0});
  }
  fd_host_.resize(fds_.size(), -1);
  auto wake = next_heartbeat_;
  if (paused) wake = std::min(wake, t + milliseconds(5));
  if (!stopping() && started_ranks_ < workers()) wake = std::min(wake, start_deadline_);
  if (teardown_deadline_) wake = std::min(wake, *teardown_deadline_);
  if (held_) wake = std::min(wake, held_->until);
  if (left_hold_) wake = std::min(wake, *left_hold_);
  const int ready = ctx_.clock->wait(fds_, wake);
  check_frozen();
  if (ready > 0) {
    // Only the hosts whose descriptors reported: a read per host per turn would make a
    // launch of N hosts cost N^2 system calls.
    int last = -1;
    for (std::size_t i = 0; i < fds_.size(); ++i) {
      if (fds_[i].revents == 0 || fd_host_[i] < 0 || fd_host_[i] == last) continue;
      last = fd_host_[i];
      service(hosts_[static_cast<std::size_t>(last)]);
    }
    relay_->flush();
  }
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

void Job::watch(std::string what, const ThreadFailure& failure) {
  watched_.push_back(Watched{std::move(what), &failure, false});
}

void Job::check_servers() {
  for (Watched& w : watched_) {
    if (w.reported || !w.failure->failed()) continue;
    w.reported = true;  // and its descriptor is no longer polled
    fail(exit_status::kLaunchFailed, "hvdrun: the " + w.what + " failed: " +
                                         describe(w.failure->get()) + "; stopped the job\n");
  }
}

void Job::send(Host& h, const proto::Message& m) {
  if (!h.closed) proto::encode(m, h.outq);
}

// Host h's spawn frames, once both h's agent (its interface) and the agent of rank 0's host
// (its free port, MASTER_PORT) have said hello.
void Job::send_spawns(Host& h) {
  h.spawned = true;
  const JobEnv env = host_job_env(h);
  for (int w : h.ranks) {
    const RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (rs.rank >= 0 && !rs.done) spawn_rank(h, w, env);
  }
}

// The job-wide environment as host h's ranks see it.
JobEnv Job::host_job_env(const Host& h) const {
  const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
  JobEnv env = job_env_;
  env.master_port = first.info.free_port;
  if (opt_.network_interface.empty()) env.rendezvous_addr = h.link->launcher_address();
  env.host_interface = h.info.iface;
  // Rank 0's host as this host reaches it.
  env.master_addr = first.local ? (h.local ? "127.0.0.1" : h.link->launcher_address())
                                : first.link->host_address();
  return env;
}

// Process `worker` of host h, at its rank in the current generation.
void Job::spawn_rank(Host& h, int worker, const JobEnv& env) {
  const RankState& rs = ranks_[static_cast<std::size_t>(worker)];
  proto::Spawn s;
  s.rank = worker;
  s.argv = opt_.command;
  s.cwd = ctx_.cwd;
  RankEnv re = rank_env(h.env->base, placement_.ranks[static_cast<std::size_t>(rs.rank)], h.name,
                        env, h.env->defaults);
  s.host_env = h.env->host_variables;
  s.env = re.set.entries();
  s.env_defaults = re.defaults.entries();
  s.control = static_cast<bool>(hooks_.reform);
  send(h, s);
}

Host* Job::owner_of(Host& h, int rank, const char* what) {
  if (rank < 0 || rank >= workers() || ranks_[static_cast<std::size_t>(rank)].host != h.index) {
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

int Job::running_ranks() const { return workers() - done_ranks_; }

void Job::fail(int exit_code, std::string message, std::vector<std::string> hosts) {
  // A lost host, a rank that could not start, a server that stopped: the likely reason why a
  // held rank lost its peer, so this failure is the job's.
  held_.reset();
  Failure f{exit_code, std::move(message), std::move(hosts)};
  if (ctx_.policy->on_failure(f)) begin_teardown();
}

// A failure that a generation running in process may survive.
void Job::job_failure(const Failure& f) {
  if (recover(f)) return;
  if (ctx_.policy->on_failure(f)) begin_teardown();
}

void Job::begin_teardown() {
  if (teardown_deadline_) return;
  if (const auto& f = ctx_.policy->outcome()) {
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

// Generation generation_'s rendezvous server. The secret is the job's, kept by the
// generations that follow in process: the surviving processes authenticate objects with the
// secret they started with (HVDRUN_SECRET in hvdrun.torch).
void Job::start_generation_server() {
  if (job_env_.secret.empty()) job_env_.secret = rendezvous::generate_secret();
  auto& server =
      servers_.emplace_back(std::make_unique<rendezvous::Server>(job_env_.secret, bind_addr_, 0));
  server->start();
  job_env_.rendezvous_port = server->port();
  watch("rendezvous server", server->failure());
  if (hooks_.on_rendezvous) hooks_.on_rendezvous(*server);
}

void Job::on_rank_elastic(Host& h, const proto::RankElastic& e) {
  owner_of(h, e.rank, "rank-elastic");
  RankState& declared = ranks_[static_cast<std::size_t>(e.rank)];
  declared.declared = std::max(declared.declared, e.generation);
  if (in_process_) return;
  for (int w : worker_of_) {
    if (ranks_[static_cast<std::size_t>(w)].declared < generation_) return;
  }
  in_process_ = true;
  spdlog::info(
      "every rank of generation {} runs under hvd.elastic.run: a failure keeps the surviving "
      "processes",
      generation_);
}

// A rank shut the current generation down on its own (its collective failed): the failure
// behind it usually reaches this process within moments; if none does, the ranks are
// moved to a next generation as they are.
void Job::on_rank_left(Host& h, const proto::RankLeft& l) {
  owner_of(h, l.rank, "rank-left");
  if (l.generation != generation_ || !in_process_ || stopping() || left_hold_) return;
  left_hold_ = now() + kLeftHold;
}

// In a generation running in process: re-forms the job around the surviving processes
// instead of stopping them. False when the failure must end the generation.
bool Job::recover(const Failure& f) {
  if (!in_process_ || !hooks_.reform || stopping() || f.interrupted || f.requested) return false;
  left_hold_.reset();
  auto how = hooks_.reform(f);
  if (!how) return false;
  return reform(*how, f, /*blamed=*/true);
}

// Moves the job to generation generation_+1 in the same processes: the surviving ranks
// first, in their old order (rank 0 then holds the committed state), then processes
// started anew where ranks ended on hosts still usable. False when fewer than the
// minimum would be left.
bool Job::reform(const JobHooks::Reform& how, const Failure& f, bool blamed) {
  auto excluded = [&](const Host& h) {
    return h.closed ||
           std::find(how.excluded.begin(), how.excluded.end(), h.name) != how.excluded.end();
  };
  std::vector<int> members;
  for (int w : worker_of_) {
    const RankState& rs = ranks_[static_cast<std::size_t>(w)];
    if (!rs.done && !excluded(hosts_[static_cast<std::size_t>(rs.host)])) members.push_back(w);
  }
  const int kept = static_cast<int>(members.size());
  if (how.max_np && kept > *how.max_np) members.resize(static_cast<std::size_t>(*how.max_np));
  std::vector<int> fresh;
  for (const Host& h : hosts_) {
    if (excluded(h) || !h.hello) continue;
    for (int w : h.ranks) {
      if (how.max_np && static_cast<int>(members.size()) >= *how.max_np) break;
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (rs.done && rs.started) {
        members.push_back(w);
        fresh.push_back(w);
      }
    }
  }
  const std::string why = f.message.substr(0, f.message.find('\n'));
  if (static_cast<int>(members.size()) < how.min_np) {
    write_all(ctx_.stderr_fd, f.message.data(), f.message.size());
    const std::string msg =
        "hvdrun: elastic: only " + counted(static_cast<long long>(members.size()), "rank") +
        " left for generation " + std::to_string(generation_ + 1) + ", fewer than --min-np " +
        std::to_string(how.min_np) + "; ending the job\n";
    write_all(ctx_.stderr_fd, msg.data(), msg.size());
    return false;
  }
  if (blamed) write_all(ctx_.stderr_fd, f.message.data(), f.message.size());
  held_.reset();
  ++generation_;
  place_members(members);
  start_generation_server();
  // The survivors hear their places through their agents; every other process of the old
  // generation is stopped by its agent.
  proto::Regenerate g = next_generation(why.rfind("hvdrun: ", 0) == 0 ? why.substr(8) : why);
  g.failure = true;
  g.hosts_removed = members.size() < static_cast<std::size_t>(kept) + fresh.size() || blamed;
  send_regenerate(g);
  start_fresh(fresh, g.reason);
  return true;
}

// The regenerate frame of the generation just placed (the same for every host, but for the
// rendezvous address and the placements send_regenerate adds).
proto::Regenerate Job::next_generation(std::string reason) const {
  proto::Regenerate g;
  g.generation = generation_;
  g.reason = std::move(reason);
  g.size = placement_.size();
  g.secret = job_env_.secret;
  g.rendezvous_port = static_cast<std::uint16_t>(job_env_.rendezvous_port);
  return g;
}

// To every agent up: the places of its running processes in the new generation (the agent
// stops its other processes).
void Job::send_regenerate(const proto::Regenerate& g) {
  for (Host& h : hosts_) {
    if (h.closed || !h.hello) continue;
    proto::Regenerate mine = g;
    mine.rendezvous_addr = host_job_env(h).rendezvous_addr;
    if (mine.rendezvous_addr.empty()) mine.rendezvous_addr = job_env_.rendezvous_addr;
    for (int w : h.ranks) {
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (rs.rank < 0 || rs.done) continue;
      const hostfile::RankSlot& slot = placement_.ranks[static_cast<std::size_t>(rs.rank)];
      mine.ranks.push_back(proto::RankPlacement{w, slot.rank, slot.local_rank, slot.local_size,
                                                slot.cross_rank, slot.cross_size});
    }
    send(h, mine);
  }
}

// Starts new processes under the numbers `fresh` of processes that ended (now placed in
// the new generation): at once where the host's agent is up, else at its hello.
void Job::start_fresh(const std::vector<int>& fresh, const std::string& why) {
  for (int w : fresh) {
    RankState& rs = ranks_[static_cast<std::size_t>(w)];
    Host& h = hosts_[static_cast<std::size_t>(rs.host)];
    rs.done = false;
    --done_ranks_;
    if (std::exchange(rs.started, false)) {
      --started_ranks_;
      --h.started;
    }
    rs.declared = -1;
    rs.stop_signal = 0;
    relay_->reopen_rank(w);
    if (h.hello && !h.closed) spawn_rank(h, w, host_job_env(h));
  }
  if (!fresh.empty()) start_deadline_ = now() + std::chrono::seconds(opt_.start_timeout_s);
  const int kept = placement_.size() - static_cast<int>(fresh.size());
  spdlog::debug("generation {}: {} ranks ({} kept, {} started anew)", generation_,
                placement_.size(), kept, fresh.size());
  if (hooks_.reformed)
    hooks_.reformed(generation_, placement_.size(), kept, static_cast<int>(fresh.size()), why);
}

// Discovery found more usable slots (`hosts`, the usable ones) while the job runs in
// process: the processes that ended on hosts of this job start again there (a host whose
// agent was lost gets a new one, after a preflight), and the running ranks move to the
// next generation at their next commit (HostsUpdatedInterrupt). False when the growth
// needs slots of hosts this job never had, or more than their processes: the job then
// restarts to grow.
bool Job::grow(const std::vector<hostfile::HostSlots>& hosts) {
  int want = 0;
  for (const auto& hs : hosts) want += hs.slots;
  if (opt_.elastic.max_np) want = std::min(want, *opt_.elastic.max_np);
  want -= placement_.size();
  if (want <= 0) return true;
  std::vector<std::string> to_open;
  std::vector<int> fresh = growth_processes(hosts, want, to_open);
  if (static_cast<int>(fresh.size()) < want) return false;
  const std::vector<std::string> failed = reopen_hosts(to_open);
  std::erase_if(fresh, [&](int w) {
    const Host& h = hosts_[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(w)].host)];
    return std::find(failed.begin(), failed.end(), h.name) != failed.end();
  });
  if (fresh.empty()) return true;
  std::vector<int> members = worker_of_;
  members.insert(members.end(), fresh.begin(), fresh.end());
  ++generation_;
  place_members(members);
  start_generation_server();
  proto::Regenerate g = next_generation("discovery found " +
                                        counted(static_cast<long long>(fresh.size()), "more slot"));
  g.hosts_added = true;
  send_regenerate(g);
  start_fresh(fresh, g.reason);
  return true;
}

// Up to `want` processes of this job that ended on `hosts` (within each host's slots), and
// in `to_open` the hosts among them whose agents are gone.
std::vector<int> Job::growth_processes(const std::vector<hostfile::HostSlots>& hosts, int want,
                                       std::vector<std::string>& to_open) const {
  std::vector<int> fresh;
  for (const auto& hs : hosts) {
    auto it = std::find_if(hosts_.begin(), hosts_.end(),
                           [&](const Host& h) { return h.name == hs.name; });
    if (it == hosts_.end()) continue;
    int members = 0;
    for (int w : worker_of_) members += ranks_[static_cast<std::size_t>(w)].host == it->index;
    int room = std::min(hs.slots, static_cast<int>(it->ranks.size())) - members;
    const std::size_t before = fresh.size();
    for (int w : it->ranks) {
      if (room <= 0 || static_cast<int>(fresh.size()) >= want) break;
      const RankState& rs = ranks_[static_cast<std::size_t>(w)];
      if (!rs.done || rs.rank >= 0) continue;
      fresh.push_back(w);
      --room;
    }
    if (fresh.size() > before && it->closed) to_open.push_back(it->name);
  }
  return fresh;
}

// New agents for the hosts whose agents were lost (the preflight blocks this loop for the
// length of an SSH login; the running ranks go on meanwhile). Returns the hosts that
// could not be reached.
std::vector<std::string> Job::reopen_hosts(const std::vector<std::string>& names) {
  std::vector<std::string> failed;
  if (names.empty()) return failed;
  for (auto& opened : hooks_.open_hosts(names)) {
    auto it = std::find_if(hosts_.begin(), hosts_.end(),
                           [&](const Host& x) { return x.name == opened.host; });
    if (it == hosts_.end()) continue;
    Host& h = *it;
    if (!opened.link) {
      spdlog::warn("host {}: {}; it takes no rank now", h.name, opened.error);
      failed.push_back(h.name);
      continue;
    }
    h.link = std::move(opened.link);
    h.closed = false;
    h.hello = false;
    h.spawned = false;
    h.decoder = proto::Decoder();
    h.outq.clear();
    h.read_chunk = Host::kMinReadChunk;
    h.last_rx = now();
    send_hello(h);
  }
  return failed;
}

// The current generation's placement: members[i] (a process) becomes rank i. Local ranks
// count on each host in rank order; a rank's cross rank is its host's index among the
// hosts that have its local rank, in the order the hosts first appear.
void Job::place_members(const std::vector<int>& members) {
  for (RankState& rs : ranks_) rs.rank = -1;
  worker_of_ = members;
  hostfile::Placement p;
  std::vector<int> host_order;
  std::vector<int> count(hosts_.size(), 0);
  for (std::size_t i = 0; i < members.size(); ++i) {
    RankState& rs = ranks_[static_cast<std::size_t>(members[i])];
    rs.rank = static_cast<int>(i);
    hostfile::RankSlot slot;
    slot.rank = static_cast<int>(i);
    slot.host_index = rs.host;
    if (count[static_cast<std::size_t>(rs.host)] == 0) host_order.push_back(rs.host);
    slot.local_rank = count[static_cast<std::size_t>(rs.host)]++;
    p.ranks.push_back(slot);
  }
  for (hostfile::RankSlot& slot : p.ranks) {
    slot.local_size = count[static_cast<std::size_t>(slot.host_index)];
    slot.cross_rank = 0;
    slot.cross_size = 0;
    for (int h : host_order) {
      if (count[static_cast<std::size_t>(h)] <= slot.local_rank) continue;
      if (h == slot.host_index) slot.cross_rank = slot.cross_size;
      ++slot.cross_size;
    }
  }
  for (int h : host_order)
    p.hosts.push_back(hostfile::HostSlots{hosts_[static_cast<std::size_t>(h)].name,
                                          count[static_cast<std::size_t>(h)]});
  placement_ = std::move(p);
  job_env_.size = placement_.size();
  job_env_.generation = generation_;
  job_env_.num_hosts = static_cast<int>(host_order.size());
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
    std::string status = h.link->close(now() + milliseconds(500));
    how = status.empty() ? "its connection closed" : "it " + status;
  }
  for (int r : lost) rank_done(r);
  if (!stopping()) {
    held_.reset();
    job_failure(Failure{exit_status::kLaunchFailed,
                        "hvdrun: the agent on host " + h.name + " ended unexpectedly (" + how +
                            ") while rank" + (lost.size() > 1 ? "s " : " ") + rank_list(lost) +
                            (lost.size() > 1 ? " were" : " was") + " running; stopped the job\n",
                        {h.name}});
  }
}

void Job::handle(Host& h, proto::Message& m) {
  if (auto* o = std::get_if<proto::Output>(&m)) {
    owner_of(h, o->rank, "output");
    relay_->add(o->rank, o->stream, o->data);
  } else if (std::holds_alternative<proto::Heartbeat>(m)) {
  } else if (auto* hello = std::get_if<proto::AgentHello>(&m)) {
    on_agent_hello(h, *hello);
  } else if (auto* st = std::get_if<proto::RankStarted>(&m)) {
    on_rank_started(h, *st);
  } else if (auto* ex = std::get_if<proto::RankExited>(&m)) {
    on_rank_exited(h, *ex);
  } else if (auto* f = std::get_if<proto::Fatal>(&m)) {
    on_fatal(h, *f);
  } else if (auto* stop = std::get_if<proto::RankStopped>(&m)) {
    on_rank_stopped(h, *stop);
  } else if (auto* e = std::get_if<proto::RankElastic>(&m)) {
    on_rank_elastic(h, *e);
  } else if (auto* l = std::get_if<proto::RankLeft>(&m)) {
    on_rank_left(h, *l);
  } else {
    throw proto::ProtocolError(std::string("agent protocol: unexpected ") + proto::type_name(m) +
                               " frame from the agent");
  }
}

void Job::on_agent_hello(Host& h, const proto::AgentHello& hello) {
  if (hello.version != proto::kVersion) {
    throw proto::ProtocolError("the agent speaks agent protocol version " +
                               std::to_string(hello.version) + " but this hvdrun speaks " +
                               std::to_string(proto::kVersion) +
                               "; install the same hvdrun version on every host");
  }
  h.hello = true;
  h.info = hello;
  if (!h.local && horovod_) admit_interface(h, hello.iface_addrs);
  spdlog::debug(
      "host {}: agent pid {} on {} ready after {} ms; interface toward the launcher: '{}'", h.name,
      hello.pid, hello.hostname,
      std::chrono::duration_cast<milliseconds>(now() - start_time_).count(), hello.iface);
  const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
  if (stopping() || !first.hello) return;
  if (&h != &first) {
    if (!h.spawned && !h.closed) send_spawns(h);
    return;
  }
  // Rank 0's host (MASTER_PORT) answered: every host that was waiting for it goes now.
  for (Host& other : hosts_) {
    if (other.hello && !other.spawned && !other.closed) send_spawns(other);
  }
}

// A remote host's --network-interface addresses, as its agent reports them, before its
// ranks start: only well-formed literals (the agent is the user's own, but a garbled report
// must not stop the job).
void Job::admit_interface(const Host& h, const std::vector<std::string>& addrs) {
  std::vector<std::string> ok;
  for (const auto& a : addrs) {
    in6_addr any{};
    if (::inet_pton(AF_INET, a.c_str(), &any) == 1 || ::inet_pton(AF_INET6, a.c_str(), &any) == 1)
      ok.push_back(a);
  }
  if (ok.empty()) return;
  horovod_->allow_also(ok);
  spdlog::debug("host {}: Horovod rendezvous admits {} address(es) of {}", h.name, ok.size(),
                opt_.network_interface);
}

void Job::on_rank_started(Host& h, const proto::RankStarted& st) {
  owner_of(h, st.rank, "rank-started");
  RankState& rs = ranks_[static_cast<std::size_t>(st.rank)];
  if (rs.started) return;
  rs.started = true;
  ++h.started;
  if (++started_ranks_ == workers()) {
    spdlog::info("{} started in {} ms",
                 started_ranks_ == 1
                     ? std::string("the job's only rank")
                     : "all " + counted(static_cast<long long>(started_ranks_), "rank"),
                 std::chrono::duration_cast<milliseconds>(now() - start_time_).count());
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
  rank_done(ex.rank);
  if (ranks_[static_cast<std::size_t>(ex.rank)].rank < 0) {
    // Left out of the current generation (its host is excluded): stopped as asked.
    spdlog::debug("process {} on host {}, left out of generation {}, ended", ex.rank, h.name,
                  generation_);
    if (all_done()) decide_held_failure();
    return;
  }
  if ((!ex.signaled && ex.value == 0) || stopping()) {
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
  if (tail.empty()) {
    msg += "hvdrun: rank " + std::to_string(ex.rank) + " wrote nothing to stderr\n";
  } else {
    msg += "hvdrun: last lines rank " + std::to_string(ex.rank) + " wrote to stderr:\n";
    for (const auto& line : tail) msg += "    " + line + "\n";
  }
  Failure f{ex.signaled ? exit_status::for_signal(ex.value) : ex.value, std::move(msg), {h.name}};
  f.rank_failed = true;
  return f;
}

void Job::on_rank_stopped(Host& h, const proto::RankStopped& stop) {
  owner_of(h, stop.rank, "rank-stopped");
  RankState& rs = ranks_[static_cast<std::size_t>(stop.rank)];
  rs.stop_signal = stop.signal;
  rs.stopped_at = now();
  if (stop.signal != 0)
    spdlog::info("rank {} on host {} was stopped by {}", stop.rank, h.name,
                 signal_text(stop.signal));
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
  } else {
    spdlog::warn("host {}: {}", h.name, f.message);
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
    std::size_t budget = 8u << 20;  // then let the other hosts have a turn
    while (read && budget > 0 && !output_backed_up()) {
      IoResult r = h.link->read(h.decoder.prepare(h.read_chunk), h.read_chunk);
      if (r.kind == IoResult::would_block) break;
      if (r.kind != IoResult::ok) {
        host_closed(h, r.kind == IoResult::eof ? std::string() : r.message);
        return;
      }
      h.decoder.commit(r.bytes);
      if (r.bytes == h.read_chunk) h.read_chunk = std::min(h.read_chunk * 2, Host::kMaxReadChunk);
      h.last_rx = now();
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

void Job::check_timers(Clock::time_point t) {
  if (held_ && t >= held_->until) decide_held_failure();
  if (left_hold_ && t >= *left_hold_) {
    left_hold_.reset();
    if (in_process_ && !stopping() && hooks_.reform) {
      // Every rank's collective failed (a mismatch, say) and nothing else did: the same
      // ranks move to a next generation, with no blame and no reset counted.
      JobHooks::Reform same;
      same.min_np = 1;
      reform(same, Failure{0, "a rank left generation " + std::to_string(generation_) + "\n", {}},
             /*blamed=*/false);
    }
  }
  if (t >= next_heartbeat_) {
    for (Host& h : hosts_) send(h, proto::Heartbeat{});
    next_heartbeat_ = t + ctx_.heartbeat_interval;
    last_heartbeat_ = t;
  }
  if (ctx_.heartbeat_timeout.count() > 0) {
    for (Host& h : hosts_) {
      if (!h.closed && t - h.last_rx > ctx_.heartbeat_timeout) {
        h.link->abort();
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g",
                      static_cast<double>(ctx_.heartbeat_timeout.count()) / 1000);
        host_closed(h, std::string("nothing heard from it for ") + secs +
                           " s: the host, the agent or the connection hangs");
      }
    }
  }
  check_start_deadline(t);
  if (in_process_ && hooks_.grow && hooks_.open_hosts && !stopping()) {
    if (auto hosts = hooks_.grow(placement_.size()); hosts && !grow(*hosts)) {
      Failure f{0,
                "hvdrun: elastic: discovery found more usable slots; stopping generation " +
                    std::to_string(generation_) + " to grow\n",
                {}};
      f.requested = true;
      if (ctx_.policy->on_failure(f)) begin_teardown();
    }
  } else if (hooks_.should_stop && !stopping()) {
    if (auto why = hooks_.should_stop()) {
      Failure f{0, "hvdrun: " + *why + "\n", {}};
      f.requested = true;
      if (ctx_.policy->on_failure(f)) begin_teardown();
    }
  }
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

int Job::finish() {
  decide_held_failure();
  for (int r = 0; r < workers(); ++r) relay_->end_rank(r);
  relay_->drain();
  for (Host& h : hosts_) {
    if (h.link) h.link->close_write();
  }
  auto deadline = now() + std::chrono::seconds(2);
  for (Host& h : hosts_) {
    if (!h.link) continue;
    std::string how = h.link->close(deadline);
    spdlog::debug("host {}: agent {}", h.name, how);
  }
  if (const auto& f = ctx_.policy->outcome()) {
    write_all(ctx_.stderr_fd, f->message.data(), f->message.size());
    return f->exit_code;
  }
  return exit_status::kOk;
}

}  // namespace

int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks,
            JobContext& context) {
  Job job(plan, options, hooks, context);
  return job.run();
}

int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks) {
  JobContext context = process_context();
  SystemJobClock clock;  // before any thread starts
  FirstFailurePolicy policy;
  context.clock = &clock;
  context.policy = &policy;
  const int code = run_job(plan, options, hooks, context);
  if (hooks.outcome != nullptr) *hooks.outcome = policy.outcome();
  return code;
}

int run_job(const LaunchOptions& options, const JobHooks& hooks) {
  return run_job(make_plan(options), options, hooks);
}

}  // namespace hvdrun::launcher
