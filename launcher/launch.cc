// launch(): plan, preflight (for hosts reached over SSH), job. The preflight's version
// check starts each remote agent in the same shell, and the job takes over each good
// host's session and agent channel.
#include "launcher/launch.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "common/exit_status.h"
#include "common/fd_limit.h"
#include "common/plural.h"
#include "common/version.h"
#include "launcher/check.h"
#include "launcher/dry_run.h"
#include "launcher/exec_agent_link.h"
#include "launcher/host_lookup.h"
#include "launcher/job.h"
#include "launcher/launch_plan.h"
#include "launcher/local_host.h"
#include "launcher/preflight.h"
#include "launcher/reaper.h"
#include "launcher/slurm_launch.h"
#include "launcher/ssh_agent_link.h"
#include "launcher/start_window.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {

using LinkMap = std::map<std::string, std::unique_ptr<AgentLink>>;

namespace {

bool any_host(const LaunchPlan& plan, LaunchMethod method) {
  return std::any_of(plan.hosts.begin(), plan.hosts.end(),
                     [&](const PlannedHost& h) { return h.method == method; });
}

// Waits until `deadline` for output from any of `pending`, then hands each one whose answer
// is complete to `done` and drops it.
template <typename Done>
void await_exec_answers(std::vector<std::unique_ptr<PendingExecAgent>>& pending,
                        std::vector<pollfd>& fds, ssh::Clock::time_point deadline, Done done) {
  fds.clear();
  for (const auto& p : pending) fds.push_back({p->fd(), POLLIN, 0});
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - ssh::Clock::now());
  const bool late = left.count() <= 0;
  if (!late && ::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1) < 0 &&
      errno != EINTR) {
    throw_errno("waiting for the exec: commands", "poll");
  }
  // Past the deadline every one still pending is done: its link() says it did not answer.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const bool ready = late || (fds[i].revents != 0 && pending[i]->receive());
    if (ready) {
      done(*pending[i]);
    } else {
      pending[kept++] = std::move(pending[i]);
    }
  }
  pending.resize(kept);
}

// Lookups of exec: host names run side by side, this many at a time, and none is waited for
// longer than this: a name a resolver cannot answer that fast is taken as one that does
// not resolve (the host is then reached by its name).
constexpr std::size_t kLookupsInFlight = 32;
constexpr std::chrono::seconds kLookupBudget{5};

// The lookups an exec: launch needs: an address per host name, for the launcher's own
// address on the route there, unless --network-interface gives that address (then there
// are none to make).
std::unique_ptr<HostLookups> exec_lookups(const std::vector<const PlannedHost*>& hosts,
                                          const LaunchOptions& options,
                                          ssh::Clock::time_point deadline) {
  if (!options.network_interface.empty()) {
    spdlog::debug("exec: hosts: no name lookups (--network-interface {} gives the address)",
                  options.network_interface);
    return nullptr;
  }
  std::vector<std::string> names;
  names.reserve(hosts.size());
  for (const PlannedHost* h : hosts) names.push_back(h->name);
  spdlog::debug("exec: hosts: looking up {} names, {} at a time", names.size(), kLookupsInFlight);
  return std::make_unique<HostLookups>(names, kLookupsInFlight,
                                       std::min(deadline, ssh::Clock::now() + kLookupBudget));
}

// A name the resolver did not answer in time may still be a real host's: its ranks would
// look for the launcher at 127.0.0.1. Say so once, with the way to give the address.
void warn_unanswered(const HostLookups& lookups) {
  const std::vector<std::string> late = lookups.unanswered();
  if (late.empty()) return;
  std::string shown;
  for (std::size_t i = 0; i < late.size() && i < 3; ++i) shown += (i ? ", " : "") + late[i];
  if (late.size() > 3) shown += ", ...";
  spdlog::warn(
      "exec: hosts: the resolver did not answer for {} within {} s ({}); they are taken as "
      "names that do not resolve, so their ranks reach the launcher at 127.0.0.1. If they "
      "are other machines, give --network-interface IF for the address to use",
      counted(static_cast<long long>(late.size()), "name"), kLookupBudget.count(), shown);
}

// Starts the exec: hosts' commands, at most HVDRUN_LAUNCH_CONCURRENCY at a time (a login
// slot is free again once its host's agent has answered), and checks each one's version
// under the start deadline. After a failure no further host is started. Returns the
// failures' messages (empty when all are good).
std::vector<std::string> start_exec_agents(const LaunchPlan& plan, const LaunchOptions& options,
                                           ssh::Clock::time_point deadline, LinkMap& links,
                                           std::size_t* skipped) {
  const std::string remote_hvdrun = expected_remote_hvdrun(options, PreflightSettings{});
  std::vector<const PlannedHost*> hosts;
  for (const auto& h : plan.hosts) {
    if (h.method == LaunchMethod::exec) hosts.push_back(&h);
  }
  const std::unique_ptr<HostLookups> lookups = exec_lookups(hosts, options, deadline);
  StartWindow window(hosts.size(), launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  std::vector<std::unique_ptr<PendingExecAgent>> pending;
  std::vector<pollfd> fds;
  std::vector<std::string> failures;
  auto failed = [&](std::string message) {
    failures.push_back(std::move(message));
    window.stop();
  };
  while (!window.done()) {
    while (auto i = window.next()) {
      const PlannedHost& h = *hosts[*i];
      try {
        pending.push_back(
            std::make_unique<PendingExecAgent>(h.name, plan.launcher.exec_argv, remote_hvdrun));
      } catch (const std::exception& e) {
        window.finished();
        failed(e.what());
      }
    }
    if (pending.empty()) continue;
    await_exec_answers(pending, fds, deadline, [&](PendingExecAgent& agent) {
      window.finished();
      try {
        links[agent.host()] =
            agent.link(kVersionLine, lookups ? lookups->address(agent.host()) : std::string());
      } catch (const std::exception& e) {
        failed(e.what());
      }
    });
  }
  *skipped = window.skipped();
  if (lookups) warn_unanswered(*lookups);
  return failures;
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

int report_failures(const std::vector<std::string>& failures, std::size_t skipped = 0) {
  std::fprintf(stderr, "hvdrun: %zu host%s could not be reached; nothing was started:\n",
               failures.size(), failures.size() > 1 ? "s" : "");
  for (const auto& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
  if (skipped > 0) {
    std::fprintf(stderr, "  (%zu more host%s not tried after the first failure)\n", skipped,
                 skipped > 1 ? "s were" : " was");
  }
  std::fflush(stderr);
  return exit_status::kLaunchFailed;
}

}  // namespace

namespace {

// Agent links to `hosts` for a job growing in process (elastic): a preflight of those
// hosts that starts their agents. Hosts that are not reached over SSH get no link.
std::vector<JobHooks::OpenedHost> open_ssh_hosts(const LaunchOptions& options,
                                                 const std::vector<std::string>& hosts) {
  LaunchOptions o = options;
  o.hosts.clear();
  for (const auto& h : hosts) o.hosts.push_back(hostfile::HostSlots{h, 1});
  o.np = static_cast<int>(hosts.size());
  const LaunchPlan plan = make_plan(o);
  std::vector<JobHooks::OpenedHost> out;
  for (const auto& h : plan.hosts) {
    if (h.method != LaunchMethod::ssh || h.local)
      out.push_back({h.name, nullptr, "not reached over SSH: the job grows by a restart"});
  }
  if (!any_host(plan, LaunchMethod::ssh)) return out;
  ssh::Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = kVersionLine;
  settings.max_parallel = static_cast<int>(launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  settings.start_agent = true;
  PreflightReport report =
      preflight(plan, o, ssh::SshConfig::load_for(o.ssh_config), connector, settings);
  for (auto& check : report.hosts) {
    if (check.local) continue;
    if (check.verdict == Verdict::ok && check.session && check.agent_channel) {
      out.push_back({check.host,
                     make_ssh_agent_link(check.host, std::move(check.session),
                                         std::move(check.agent_channel)),
                     ""});
    } else {
      out.push_back({check.host, nullptr,
                     "failed the preflight: " + check.detail +
                         (check.fix.empty() ? std::string() : "; " + check.fix)});
    }
  }
  return out;
}

}  // namespace

int launch(const LaunchOptions& options) { return launch(options, JobHooks{}); }

int launch(const LaunchOptions& options, JobHooks hooks) {
  const LaunchPlan plan = make_plan(options);
  if (options.dry_run) {
    std::fputs((options.json ? render_dry_run_json(plan) : render_dry_run(plan)).c_str(), stdout);
    std::fflush(stdout);
    return exit_status::kOk;
  }
  check_fd_budget(plan);
  if (hooks.reform)
    hooks.open_hosts = [&options](const std::vector<std::string>& hosts) {
      return open_ssh_hosts(options, hosts);
    };
  // Whatever local ranks leave behind, even past a killed agent, ends with the launch.
  const LauncherReaper reaper(hooks.own_children);
  if (plan.all_local()) return run_job(plan, options, hooks);

  const auto start = ssh::Clock::now();
  const auto deadline = start + std::chrono::seconds(options.start_timeout_s);
  LinkMap links;
  if (any_host(plan, LaunchMethod::exec)) {
    std::size_t skipped = 0;
    auto failures = start_exec_agents(plan, options, deadline, links, &skipped);
    if (!failures.empty()) return report_failures(failures, skipped);
  }
  if (any_host(plan, LaunchMethod::slurm)) {
    SlurmStepSpec step;
    for (const auto& h : plan.hosts) {
      if (h.method == LaunchMethod::slurm) step.nodes.push_back(h.name);
    }
    step.remote_hvdrun = expected_remote_hvdrun(options, PreflightSettings{});
    if (!options.network_interface.empty()) {
      step.bind_address = interface_address(options.network_interface);
    }
    step.deadline = deadline;
    try {
      for (auto& [node, link] : start_slurm_agents(step)) links[node] = std::move(link);
    } catch (const LaunchError& e) {
      return report_failures({e.what()});
    }
  }
  PreflightReport report;
  if (any_host(plan, LaunchMethod::ssh)) {
    ssh::Libssh2Connector connector;
    PreflightSettings settings;
    settings.expected_version = kVersionLine;
    settings.max_parallel =
        static_cast<int>(launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
    // Every host's agent starts in the shell that reports its version: one remote shell
    // per host per job, all in parallel.
    settings.start_agent = true;
    report =
        preflight(plan, options, ssh::SshConfig::load_for(options.ssh_config), connector, settings);
    if (!report.ok()) {
      std::string table = render_table(report);
      std::fprintf(stderr, "hvdrun: %d host%s failed the preflight; nothing was started:\n%s",
                   report.failures(), report.failures() > 1 ? "s" : "", table.c_str());
      std::fflush(stderr);
      if (hooks.outcome != nullptr) {
        Failure f{exit_status::kLaunchFailed, "hvdrun: the preflight failed\n", {}};
        for (const auto& check : report.hosts) {
          if (check.verdict != Verdict::ok) f.hosts.push_back(check.host);
        }
        *hooks.outcome = std::move(f);
      }
      return exit_status::kLaunchFailed;
    }
  }
  hooks.launch_start = start;
  // Each SSH host's checked session by name: the job asks for every host's link once.
  std::unordered_map<std::string, HostCheck*> checked;
  for (auto& check : report.hosts) {
    if (check.session && check.agent_channel) checked.try_emplace(check.host, &check);
  }
  hooks.remote_link = [&](const std::string& host) -> std::unique_ptr<AgentLink> {
    if (auto it = links.find(host); it != links.end() && it->second) return std::move(it->second);
    if (auto it = checked.find(host); it != checked.end()) {
      HostCheck& check = *it->second;
      checked.erase(it);
      return make_ssh_agent_link(host, std::move(check.session), std::move(check.agent_channel));
    }
    // Cannot happen: the preflight and the job read the same plan.
    throw LaunchError("host " + host + " has no agent link from the launch");
  };
  return run_job(plan, options, hooks);
}

}  // namespace hvdrun::launcher
