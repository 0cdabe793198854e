// The ssh method: the preflight logs in to every host in parallel, checks its hvdrun and
// starts its agent in the same remote shell; each good host's session and agent channel
// become its link.
#include "launcher/start/host_start.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/version.h"
#include "launcher/hosts/ssh_agent_link.h"
#include "launcher/plan/start_window.h"
#include "ssh/libssh2_session.h"

namespace hvdrun::launcher {

namespace {

// The preflight of hosts whose agents start in the shell that reports their version: one
// remote shell per host per job, all in parallel (within the start window).
PreflightReport start_agents(const LaunchPlan& plan, const LaunchOptions& options) {
  ssh::Libssh2Connector connector;
  PreflightSettings settings;
  settings.expected_version = kVersionLine;
  settings.max_parallel = static_cast<int>(launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  settings.start_agent = true;
  return preflight(plan, options, ssh::SshConfig::load_for(options.ssh_config), connector,
                   settings);
}

class SshStarter final : public HostStarter {
 public:
  void start(const StartContext& context, const std::vector<const PlannedHost*>& /*hosts*/,
             StartTable& table) override {
    PreflightReport report = start_agents(context.plan, context.options);
    if (report.ok()) {
      for (HostCheck& check : report.hosts) {
        if (!check.session || !check.agent_channel || table.links.count(check.host) != 0) continue;
        table.links[check.host] = make_ssh_agent_link(check.host, std::move(check.session),
                                                      std::move(check.agent_channel));
      }
    }
    table.preflight = std::move(report);
  }
};

}  // namespace

std::unique_ptr<HostStarter> make_ssh_starter() { return std::make_unique<SshStarter>(); }

}  // namespace hvdrun::launcher
