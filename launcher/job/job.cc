// run_job: the launcher's single supervision loop over every agent link, written as the
// steps of a launch (lay out the hosts, start the agents, the output relay and the
// servers, supervise, finish). Time, waiting, output and the failure rule come through
// the JobContext. Teardown runs on every path: Kill frames to every agent (SIGTERM,
// grace, SIGKILL there), then closing the links, then reaping. Nothing is left running: an
// agent whose link closes kills its ranks, and every rank dies with its agent
// (PR_SET_PDEATHSIG).
//
// The Job's parts live in job_state.h and the job_*.cc files beside this one; this file
// has the steps, the loop and the agents' events.
#include "launcher/job/job.h"

#include <arpa/inet.h>
#include <poll.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd.h"
#include "common/plural.h"
#include "compat/horovod_http_server.h"
#include "launcher/agent/agent_protocol.h"
#include "launcher/job/job_state.h"
#include "launcher/output/output_files.h"
#include "launcher/output/output_relay.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/plan/local_host.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/rank_env.h"
#include "launcher/process/subprocess.h"
#include "rendezvous/server.h"

namespace hvdrun::launcher::job_detail {

bool ip_literal(const std::string& a) {
  in6_addr any{};
  return ::inet_pton(AF_INET, a.c_str(), &any) == 1 || ::inet_pton(AF_INET6, a.c_str(), &any) == 1;
}

EnvSource env_source_of(bool local, LaunchMethod method) {
  return local ? EnvSource::launcher : env_source(to_string(method));
}

int Job::run() {
  start_time_ = now();
  started_wall_ = std::chrono::system_clock::now();
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
  for (std::size_t i = 0; i < plan_.hosts.size(); ++i) {
    const PlannedHost& planned = plan_.hosts[i];
    Host h;
    h.index = static_cast<int>(i);
    h.name = planned.name;
    h.local = planned.local;
    h.method = planned.method;
    h.ranks = planned.ranks;
    for (int r : h.ranks) ranks_[static_cast<std::size_t>(r)].host = h.index;
    h.env = &host_env(env_source_of(planned.local, planned.method));
    hosts_.push_back(std::move(h));
  }
}

// The base environment of the hosts of one kind, made when the first such host needs it
// (at the start, or when the job grows onto a host of a kind it did not have).
const HostEnv& Job::host_env(EnvSource source) {
  HostEnv& e = host_envs_[static_cast<int>(source)];
  if (!e.ready) {
    e.base = host_base_env(ctx_.environment, source, opt_.env);
    e.host_variables = host_variables(source);
    e.defaults = host_defaults(ctx_.environment, source);
    e.ready = true;
  }
  return e;
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
    return hooks_.test.local_link ? hooks_.test.local_link(h.name)
                                  : start_local_agent(hooks_.test.agent_exe);
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
  hello.want_topology = !h.local && wants_topology(opt_);
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
  ro.console_ranks = console_ranks(opt_, placement_);
  ro.console_filtered = !opt_.console_local_ranks.empty();
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
  if (hooks_.test.horovod_peers) horovod_->judge_peers_with(hooks_.test.horovod_peers);
  std::vector<std::string> allowed;
  for (const Host& h : hosts_) {
    if (h.local) continue;
    // An exec: host whose name does not resolve here has no address to admit.
    if (const std::string a = h.link->host_address(); ip_literal(a)) allowed.push_back(a);
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
  if (opt_.timeout_s) {
    timeout_deadline_ = hooks_.job_start.value_or(hooks_.launch_start.value_or(start_time_)) +
                        std::chrono::seconds(*opt_.timeout_s);
  }
  next_heartbeat_ = now() + ctx_.heartbeat_interval;
  last_heartbeat_ = now();
  open_stacks_socket();
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
  for (int sig : ctx_.clock->take_forwarded()) forward_signal(sig);
  if (ctx_.clock->take_stacks_request() && !stopping() && !stacks_)
    request_stacks("SIGQUIT; the job goes on", false);
  if (all_done()) return false;
  const auto t = now();
  if (teardown_overdue(t)) return false;
  // Write what is queued before waiting: an SSH link polls for input only (output
  // waits on the peer's window), and an agent says nothing before the launcher's hello.
  for (Host& h : hosts_) {
    if (!h.outq.empty()) service(h, /*read=*/false);
  }
  wait_for_events(t);
  accept_stacks_clients();
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
  if (timeout_deadline_) *timeout_deadline_ += t - before;
  for (Host& h : hosts_) {
    send(h, proto::Resume{});
    h.last_rx = t;
  }
  last_heartbeat_ = t;  // the agents' silence limit counts from the resume
  flush_links(t + milliseconds(1000));
  spdlog::debug("resumed after {} ms",
                std::chrono::duration_cast<milliseconds>(t - before).count());
}

// SIGUSR1 or SIGUSR2 to hvdrun (Slurm's --signal, a spot instance's notice): every agent
// sends it to its ranks' processes. Not in a teardown: the ranks are being stopped.
void Job::forward_signal(int sig) {
  if (stopping()) return;
  int hosts = 0;
  for (Host& h : hosts_) {
    if (h.closed) continue;
    send(h, proto::Signal{sig});
    ++hosts;
  }
  spdlog::info("{} forwarded to the ranks on {}", strsignal(sig), counted(hosts, "host"));
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
  if (stacks_socket_) fds_.push_back({stacks_socket_->fd(), POLLIN, 0});
  fd_host_.resize(fds_.size(), -1);
  auto wake = next_heartbeat_;
  if (paused) wake = std::min(wake, t + milliseconds(5));
  if (!stopping() && started_ranks_ < workers()) wake = std::min(wake, start_deadline_);
  if (!join_watch_.empty() && !stopping()) wake = std::min(wake, join_deadline_);
  if (teardown_deadline_) wake = std::min(wake, *teardown_deadline_);
  if (timeout_deadline_ && !stopping() && !stacks_) wake = std::min(wake, *timeout_deadline_);
  if (stacks_) wake = std::min(wake, stacks_->until);
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
  rs.ended_wall = std::chrono::system_clock::now();
  ++done_ranks_;
  relay_->end_rank(rank);
}

int Job::running_ranks() const { return workers() - done_ranks_; }

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
  } else if (auto* stacks = std::get_if<proto::Stacks>(&m)) {
    on_stacks(h, *stacks);
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
  if (!place_host(h)) return;  // refused: the job fails before any rank starts
  spdlog::debug(
      "host {}: agent pid {} on {} ready after {} ms; interface toward the launcher: '{}'", h.name,
      hello.pid, hello.hostname,
      std::chrono::duration_cast<milliseconds>(now() - start_time_).count(), hello.iface);
  const Host& first = hosts_[static_cast<std::size_t>(placement_.ranks[0].host_index)];
  if (stopping() || !first.hello || !every_host_placed()) return;
  // Rank 0's host (MASTER_PORT) answered, and when placing every host did: those waiting go.
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
    if (ip_literal(a)) ok.push_back(a);
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
  rs.started_wall = std::chrono::system_clock::now();
  ++h.started;
  if (++started_ranks_ == workers()) {
    spdlog::info("{} started in {} ms",
                 started_ranks_ == 1
                     ? std::string("the job's only rank")
                     : "all " + counted(static_cast<long long>(started_ranks_), "rank"),
                 std::chrono::duration_cast<milliseconds>(now() - start_time_).count());
  }
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
  check_left_hold(t);
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
  check_stacks(t);
  check_timeout(t);
  check_join_deadline(t);
  check_growth_or_stop();
}

int Job::finish() {
  if (stall_failure_) decide(*stall_failure_);  // every rank ended before its report came
  decide_held_failure();
  for (int r = 0; r < workers(); ++r) relay_->end_rank(r);
  relay_->drain();
  tell_joined_nodes();
  for (Host& h : hosts_) {
    if (h.link) h.link->close_write();
  }
  auto deadline = now() + std::chrono::seconds(2);
  for (Host& h : hosts_) {
    if (!h.link) continue;
    std::string how = h.link->close(deadline);
    spdlog::debug("host {}: agent {}", h.name, how);
  }
  write_result_file();
  if (const auto& f = outcome_) {
    write_all(ctx_.stderr_fd, f->message.data(), f->message.size());
    return f->exit_code;
  }
  return exit_status::kOk;
}

}  // namespace hvdrun::launcher::job_detail

namespace hvdrun::launcher {

int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks,
            JobContext& context) {
  job_detail::Job job(plan, options, hooks, context);
  const int code = job.run();
  if (hooks.outcome != nullptr) *hooks.outcome = job.outcome();
  return code;
}

int run_job(const LaunchPlan& plan, const LaunchOptions& options, const JobHooks& hooks) {
  JobContext context = process_context();
  if (options.kill_grace_s) context.kill_grace = std::chrono::seconds(*options.kill_grace_s);
  SystemJobClock clock;  // before any thread starts
  context.clock = &clock;
  return run_job(plan, options, hooks, context);
}

int run_job(const LaunchOptions& options, const JobHooks& hooks) {
  return run_job(make_plan(options), options, hooks);
}

}  // namespace hvdrun::launcher
