// launch(): a short list of passes. Plan the hosts; check what the launch needs before
// anything starts (the descriptor budget); start every host with its launch method
// (host_start.h); in join mode, plan again from the counts of ranks the nodes said they run
// (join_layout.h); run the job on the links they left; report a start that failed.
#include "launcher/start/launch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd_limit.h"
#include "common/plural.h"
#include "launcher/hosts/host_topologies.h"
#include "launcher/job/job.h"
#include "launcher/plan/dry_run.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/rank_devices.h"
#include "launcher/plan/start_window.h"
#include "launcher/process/reaper.h"
#include "launcher/start/host_start.h"
#include "launcher/start/join_port.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {

namespace {

// With a placement, each host's ranks planned from its topology: this machine's read here,
// each SSH host's read there (its preflight, as a launch would run it). A host that cannot
// place its ranks is refused here as the launch would refuse it (UsageError).
std::vector<PlannedBindings> dry_run_bindings(const LaunchPlan& plan, const LaunchOptions& options,
                                              bool& hosts_ok) {
  ssh::Libssh2Connector connector;
  const ProbedHosts probed = probe_hosts(plan, options, connector);
  hosts_ok = probed.report.ok();
  std::string ignored;
  const LaunchOptions placed = with_placement(plan, options, ignored, [&] {
    for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
      if (!plan.hosts[i].local) continue;
      if (!probed.hosts[i].topology) throw std::runtime_error(probed.hosts[i].why_not);
      return *probed.hosts[i].topology;
    }
    throw std::logic_error("with_placement asked for this machine's topology without it");
  });
  std::vector<PlannedBindings> out;
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    const PlannedHost& h = plan.hosts[i];
    const ProbedHost& p = probed.hosts[i];
    PlannedBindings b;
    if (!p.topology) {
      b.why_not = p.why_not;
    } else if (h.local) {
      b.bindings = host_bindings(*p.topology, h, placed, process_env(), interface_present);
    } else {
      b.bindings = remote_bindings(*p.topology, h, placed);
    }
    out.push_back(std::move(b));
  }
  return out;
}

int print_dry_run(const LaunchPlan& plan, const LaunchOptions& options) {
  bool hosts_ok = true;
  const std::vector<PlannedBindings> bindings = wants_topology(options)
                                                    ? dry_run_bindings(plan, options, hosts_ok)
                                                    : std::vector<PlannedBindings>{};
  std::fputs(
      (options.json ? render_dry_run_json(plan, bindings) : render_dry_run(plan, bindings)).c_str(),
      stdout);
  std::fflush(stdout);
  return hosts_ok ? exit_status::kOk : exit_status::kLaunchFailed;
}

// The launcher holds about two descriptors per host for the whole job (a pipe pair or a
// socket), three per start in flight, and a few dozen of its own (servers, relay, stdio). A
// limit below that would stop the launch halfway, after hundreds of logins: refuse first.
void check_fd_budget(const LaunchPlan& plan) {
  std::size_t hosts = 0;
  for (const auto& h : plan.hosts) hosts += h.local ? 0 : 1;
  if (hosts == 0) return;
  const std::size_t window =
      std::min(hosts, launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  const unsigned long long needed = 2ULL * hosts + 3ULL * window + 64;
  const FdLimits limit = fd_limits();
  if (limit.soft >= needed) return;
  throw UsageError(counted(static_cast<long long>(hosts), "host") + " need" +
                   (hosts == 1 ? "s" : "") + " about " + std::to_string(needed) +
                   " open descriptors in hvdrun, but its open-file limit is " +
                   std::to_string(limit.soft) + " (hard limit " + std::to_string(limit.hard) +
                   ", to which hvdrun raises it); raise the hard limit for this user (ulimit -Hn, "
                   "/etc/security/limits.conf or LimitNOFILE= in a systemd unit), launch on "
                   "fewer hosts, or lower " +
                   kLaunchConcurrencyVar + " (now " + std::to_string(window) +
                   " starts in flight)");
}

}  // namespace

int launch(const LaunchOptions& options) { return launch(options, JobHooks{}); }

int launch(const LaunchOptions& given, JobHooks hooks) {
  if (given.join.enabled() && given.join.node_rank != 0 && !given.dry_run)
    return run_joined_node(given);
  ssh::Libssh2Connector connector;
  // `host:auto` and -np auto: each such host's GPUs counted first, over SSH where remote.
  const LaunchOptions options = with_counted_slots(given, connector);
  const LaunchPlan plan = make_plan(options);
  if (options.dry_run) return print_dry_run(plan, options);
  // Binding: this machine's ranks checked (a refusal stops here) and reported; the policy
  // then rides in every rank's environment to the agents that apply it.
  std::string bindings;
  const LaunchOptions placed = with_placement(plan, options, bindings);
  if (options.report_bindings) std::fputs(bindings.c_str(), stderr);
  std::fputs(omp_note(placed, process_env()).c_str(), stderr);
  check_fd_budget(plan);
  if (hooks.reform)
    hooks.open_hosts = [&placed](const std::vector<std::string>& hosts) {
      return open_hosts(placed, hosts);
    };
  // Whatever local ranks leave behind, even past a killed agent, ends with the launch.
  const LauncherReaper reaper(hooks.own_children);
  if (plan.all_local()) return run_job(plan, placed, hooks);
  const auto start = std::chrono::steady_clock::now();
  StartTable started =
      start_hosts({plan, placed, start + std::chrono::seconds(placed.start_timeout_s)});
  if (!started.ok()) return report_start_failures(started, hooks.outcome);
  hooks.remote_link = [&started](const std::string& host) { return started.take(host); };
  if (!options.join.enabled()) return run_job(plan, placed, hooks);
  // Join mode waited for the nodes under --rdzv-timeout: --start-timeout counts from now.
  hooks.launch_start = std::chrono::steady_clock::now();
  // The plan above gave every node this node's count; each node's own count came with its
  // hello. No rank has started yet (the job starts them all), so the job runs on the plan
  // those counts make: node 0's ranks first, then node 1's, and so on (in elastic join, the
  // nodes that came).
  const LaunchOptions joined = laid_out(placed, started.join_nodes);
  // Elastic join: nodes that join later come through node 0's port, not discovery.
  if (started.join_port && hooks.reform) follow_joins(started.join_port, hooks);
  return run_job(make_plan(joined), joined, hooks);
}

}  // namespace hvdrun::launcher
