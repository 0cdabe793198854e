// The registry of launch methods, the start of all hosts through it, and the report of a
// start that failed.
#include "launcher/host_start.h"

#include <cstdio>
#include <utility>

#include "common/error.h"
#include "common/exit_status.h"
#include "launcher/check.h"

namespace hvdrun::launcher {

namespace {

struct Registration {
  LaunchMethod method;
  std::unique_ptr<HostStarter> (*make)();
};

// The methods in the order they start: the exec: commands and the Slurm step first (each
// waits on children of the launcher), then the SSH preflight, whose sessions stay open
// until the job takes them.
constexpr Registration kStarters[] = {
    {LaunchMethod::local, &make_local_starter},
    {LaunchMethod::exec, &make_exec_starter},
    {LaunchMethod::slurm, &make_slurm_starter},
    {LaunchMethod::ssh, &make_ssh_starter},
};

}  // namespace

bool StartTable::ok() const { return unreachable.empty() && (!preflight || preflight->ok()); }

std::unique_ptr<AgentLink> StartTable::take(const std::string& host) {
  auto it = links.find(host);
  // Cannot happen: the start and the job read the same plan.
  if (it == links.end() || !it->second) {
    throw LaunchError("host " + host + " has no agent link from the launch");
  }
  std::unique_ptr<AgentLink> link = std::move(it->second);
  links.erase(it);
  return link;
}

StartTable start_hosts(const StartContext& context) {
  StartTable table;
  for (const Registration& r : kStarters) {
    std::vector<const PlannedHost*> hosts;
    for (const PlannedHost& h : context.plan.hosts) {
      if (h.method == r.method) hosts.push_back(&h);
    }
    if (hosts.empty()) continue;
    r.make()->start(context, hosts, table);
    if (!table.ok()) break;
  }
  return table;
}

int report_start_failures(const StartTable& table, std::optional<Failure>* outcome) {
  if (table.preflight && !table.preflight->ok()) {
    const PreflightReport& report = *table.preflight;
    const std::string rendered = render_table(report);
    std::fprintf(stderr, "hvdrun: %d host%s failed the preflight; nothing was started:\n%s",
                 report.failures(), report.failures() > 1 ? "s" : "", rendered.c_str());
    std::fflush(stderr);
    if (outcome != nullptr) {
      Failure f{exit_status::kLaunchFailed, "hvdrun: the preflight failed\n", {}};
      for (const auto& check : report.hosts) {
        if (check.verdict != Verdict::ok) f.hosts.push_back(check.host);
      }
      *outcome = std::move(f);
    }
    return exit_status::kLaunchFailed;
  }
  const auto& failures = table.unreachable;
  std::fprintf(stderr, "hvdrun: %zu host%s could not be reached; nothing was started:\n",
               failures.size(), failures.size() > 1 ? "s" : "");
  for (const auto& f : failures) std::fprintf(stderr, "  %s\n", f.c_str());
  if (table.skipped > 0) {
    std::fprintf(stderr, "  (%zu more host%s not tried after the first failure)\n", table.skipped,
                 table.skipped > 1 ? "s were" : " was");
  }
  std::fflush(stderr);
  return exit_status::kLaunchFailed;
}

}  // namespace hvdrun::launcher
