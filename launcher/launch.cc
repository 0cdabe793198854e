// launch(): plan, preflight (for hosts reached over SSH), job. The preflight's version
// check starts each remote agent in the same shell, and the job takes over each good
// host's session and agent channel.
#include "launcher/launch.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/version.h"
#include "launcher/check.h"
#include "launcher/dry_run.h"
#include "launcher/exec_agent_link.h"
#include "launcher/job.h"
#include "launcher/launch_plan.h"
#include "launcher/local_host.h"
#include "launcher/preflight.h"
#include "launcher/reaper.h"
#include "launcher/slurm_launch.h"
#include "launcher/ssh_agent_link.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {

using LinkMap = std::map<std::string, std::unique_ptr<AgentLink>>;

namespace {

bool any_host(const LaunchPlan& plan, LaunchMethod method) {
  return std::any_of(plan.hosts.begin(), plan.hosts.end(),
                     [&](const PlannedHost& h) { return h.method == method; });
}

// Starts every exec: host's command at once, then checks each one's version under the
// start deadline. Returns the failures' messages (empty when all are good).
std::vector<std::string> start_exec_agents(const LaunchPlan& plan, const LaunchOptions& options,
                                           ssh::Clock::time_point deadline, LinkMap& links) {
  const std::string remote_hvdrun = expected_remote_hvdrun(options, PreflightSettings{});
  std::vector<std::pair<std::string, std::unique_ptr<PendingExecAgent>>> pending;
  std::vector<std::string> failures;
  for (const auto& h : plan.hosts) {
    if (h.method != LaunchMethod::exec) continue;
    try {
      pending.emplace_back(h.name, std::make_unique<PendingExecAgent>(
                                       h.name, plan.launcher.exec_argv, remote_hvdrun));
    } catch (const std::exception& e) {
      failures.emplace_back(e.what());
    }
  }
  for (auto& [host, agent] : pending) {
    try {
      links[host] = agent->finish(kVersionLine, deadline);
    } catch (const std::exception& e) {
      failures.emplace_back(e.what());
    }
  }
  return failures;
}

int report_failures(const std::vector<std::string>& failures) {
  std::fprintf(stderr, "hvdrun: %zu host%s could not be reached; nothing was started:\n",
               failures.size(), failures.size() > 1 ? "s" : "");
  for (const auto& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
  std::fflush(stderr);
  return 255;
}

}  // namespace

int launch(const LaunchOptions& options) { return launch(options, JobHooks{}); }

int launch(const LaunchOptions& options, JobHooks hooks) {
  const LaunchPlan plan = make_plan(options);
  if (options.dry_run) {
    std::fputs((options.json ? render_dry_run_json(plan) : render_dry_run(plan)).c_str(), stdout);
    std::fflush(stdout);
    return 0;
  }
  // Whatever local ranks leave behind, even past a killed agent, ends with the launch.
  const LauncherReaper reaper;
  if (plan.all_local()) return run_job(plan, options, hooks);

  const auto start = ssh::Clock::now();
  const auto deadline = start + std::chrono::seconds(options.start_timeout_s);
  LinkMap links;
  if (any_host(plan, LaunchMethod::exec)) {
    auto failures = start_exec_agents(plan, options, deadline, links);
    if (!failures.empty()) return report_failures(failures);
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
        Failure f{255, "hvdrun: the preflight failed\n", {}};
        for (const auto& check : report.hosts) {
          if (check.verdict != Verdict::ok) f.hosts.push_back(check.host);
        }
        *hooks.outcome = std::move(f);
      }
      return 255;
    }
  }
  hooks.launch_start = start;
  hooks.remote_link = [&](const std::string& host) -> std::unique_ptr<AgentLink> {
    if (auto it = links.find(host); it != links.end() && it->second) return std::move(it->second);
    for (auto& check : report.hosts) {
      if (check.host != host || !check.session || !check.agent_channel) continue;
      return make_ssh_agent_link(host, std::move(check.session), std::move(check.agent_channel));
    }
    // Cannot happen: the preflight and the job read the same plan.
    throw LaunchError("host " + host + " has no agent link from the launch");
  };
  return run_job(plan, options, hooks);
}

}  // namespace hvdrun::launcher
