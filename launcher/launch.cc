// launch(): plan, preflight (for hosts reached over SSH), job. The preflight's version
// check starts each remote agent in the same shell, and the job takes over each good
// host's session and agent channel.
#include "launcher/launch.h"

#include <cstdio>
#include <string>

#include "common/error.h"
#include "common/version.h"
#include "launcher/check.h"
#include "launcher/dry_run.h"
#include "launcher/job.h"
#include "launcher/launch_plan.h"
#include "launcher/preflight.h"
#include "launcher/ssh_agent_link.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {

int launch(const LaunchOptions& options) {
  const LaunchPlan plan = make_plan(options);
  if (options.dry_run) {
    std::fputs((options.json ? render_dry_run_json(plan) : render_dry_run(plan)).c_str(), stdout);
    std::fflush(stdout);
    return 0;
  }
  if (plan.all_local()) return run_job(plan, options);

  const auto start = ssh::Clock::now();
  ssh::Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = kVersionLine;
  // Every host's agent starts in the shell that reports its version: one remote shell per
  // host per job, all in parallel.
  settings.start_agent = true;
  PreflightReport report =
      preflight(plan, options, ssh::SshConfig::load_for(options.ssh_config), connector, settings);
  if (!report.ok()) {
    std::string table = render_table(report);
    std::fprintf(stderr, "hvdrun: %d host%s failed the preflight; nothing was started:\n%s",
                 report.failures(), report.failures() > 1 ? "s" : "", table.c_str());
    std::fflush(stderr);
    return 255;
  }
  JobHooks hooks;
  hooks.launch_start = start;
  hooks.remote_link = [&](const std::string& host) -> std::unique_ptr<AgentLink> {
    for (auto& check : report.hosts) {
      if (check.host != host || !check.session || !check.agent_channel) continue;
      return make_ssh_agent_link(host, std::move(check.session), std::move(check.agent_channel));
    }
    // Cannot happen: the preflight and the job read the same plan.
    throw LaunchError("host " + host + " has no SSH session from the preflight");
  };
  return run_job(plan, options, hooks);
}

}  // namespace hvdrun::launcher
