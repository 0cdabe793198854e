// The registry of launch methods, the start of all hosts through it (at the launch, and of
// the hosts a job grows onto in process), and the report of a start that failed.
#include "launcher/start/host_start.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "common/error.h"
#include "common/exit_status.h"
#include "launcher/hosts/check.h"
#include "launcher/hosts/ssh_agent_link.h"

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
    {LaunchMethod::local, &make_local_starter}, {LaunchMethod::exec, &make_exec_starter},
    {LaunchMethod::slurm, &make_slurm_starter}, {LaunchMethod::ssh, &make_ssh_starter},
    {LaunchMethod::join, &make_join_starter},
};

// The hosts of `plan` whose method is `method`, in plan order.
std::vector<const PlannedHost*> hosts_of(const LaunchPlan& plan, LaunchMethod method) {
  std::vector<const PlannedHost*> hosts;
  for (const PlannedHost& h : plan.hosts) {
    if (h.method == method) hosts.push_back(&h);
  }
  return hosts;
}

// Why `host` has no link in `table` after a start: its preflight verdict, else the failure
// that names it, else the first failure of its method (the one that stopped its start).
std::string why_not_started(const StartTable& table, const std::string& host) {
  if (table.preflight) {
    for (const HostCheck& check : table.preflight->hosts) {
      if (check.host != host || check.verdict == Verdict::ok) continue;
      return "failed the preflight: " + check.detail +
             (check.fix.empty() ? std::string() : "; " + check.fix);
    }
  }
  for (const std::string& message : table.unreachable) {
    if (message.find(host) != std::string::npos) return message;
  }
  if (!table.unreachable.empty())
    return "not started after another host failed to start: " + table.unreachable.front();
  return "its agent did not answer within --start-timeout";
}

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
    const std::vector<const PlannedHost*> hosts = hosts_of(context.plan, r.method);
    if (hosts.empty()) continue;
    r.make()->start(context, hosts, table);
    if (!table.ok()) break;
  }
  return table;
}

std::vector<JobHooks::OpenedHost> open_hosts(const LaunchOptions& options,
                                             const std::vector<std::string>& hosts) {
  LaunchOptions o = options;
  o.hosts.clear();
  // The hosts joining are named already: the start's filter is not applied again.
  o.include.clear();
  o.exclude.clear();
  for (const auto& h : hosts) o.hosts.push_back(hostfile::HostSlots{h, 1});
  o.np = static_cast<int>(hosts.size());
  const LaunchPlan plan = make_plan(o);
  const StartContext context{
      plan, o, std::chrono::steady_clock::now() + std::chrono::seconds(options.start_timeout_s)};
  StartTable table;
  for (const Registration& r : kStarters) {
    const std::vector<const PlannedHost*> of_method = hosts_of(plan, r.method);
    if (!of_method.empty()) r.make()->start(context, of_method, table);
  }
  std::vector<JobHooks::OpenedHost> out;
  for (const PlannedHost& h : plan.hosts) {
    JobHooks::OpenedHost opened{h.name, nullptr, "", h.method, h.local};
    if (h.local) {
      out.push_back(std::move(opened));
      continue;
    }
    if (auto it = table.links.find(h.name); it != table.links.end() && it->second) {
      opened.link = std::move(it->second);
    } else if (table.preflight) {
      // The SSH start leaves the sessions of its good hosts in its report when another
      // failed (a failed launch drops them at once, where a link would wait up to 2 s for
      // each agent to close): this host's is still usable here.
      for (HostCheck& check : table.preflight->hosts) {
        if (check.host != h.name || check.verdict != Verdict::ok || !check.session ||
            !check.agent_channel)
          continue;
        opened.link =
            make_ssh_agent_link(h.name, std::move(check.session), std::move(check.agent_channel));
      }
    }
    if (!opened.link) opened.error = why_not_started(table, h.name);
    out.push_back(std::move(opened));
  }
  return out;
}

int report_start_failures(const StartTable& table, std::optional<Failure>* outcome) {
  if (table.preflight && !table.preflight->ok()) {
    const PreflightReport& report = *table.preflight;
    const std::string rendered = render_table(report);
    std::fprintf(stderr, "hvdrun: %d host%s failed the preflight; nothing was started:\n%s",
                 report.failures(), report.failures() > 1 ? "s" : "", rendered.c_str());
    std::fflush(stderr);
    if (outcome != nullptr) {
      Failure f{exit_status::kLaunchFailed,
                "hvdrun: " + std::to_string(report.failures()) +
                    (report.failures() > 1 ? " hosts" : " host") +
                    " failed the preflight; nothing was started:\n" + rendered,
                {}};
      for (const auto& check : report.hosts) {
        if (check.verdict != Verdict::ok) f.hosts.push_back(check.host);
      }
      *outcome = std::move(f);
    }
    return exit_status::kLaunchFailed;
  }
  const auto& failures = table.unreachable;
  std::string text;
  if (table.join) {
    // Join mode: node 0 says what kept the job from starting (a node that did not come).
    for (const auto& f : failures) text += "hvdrun: node 0: " + f + "\n";
  } else {
    text = "hvdrun: " + std::to_string(failures.size()) +
           (failures.size() > 1 ? " hosts" : " host") +
           " could not be reached; nothing was started:\n";
    for (const auto& f : failures) text += "  " + f + "\n";
  }
  if (table.skipped > 0) {
    text += "  (" + std::to_string(table.skipped) +
            (table.skipped > 1 ? " more hosts were" : " more host was") +
            " not tried after the first failure)\n";
  }
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  // The message for --result-file; final: an elastic job ends here, as before any rank.
  if (outcome != nullptr) {
    *outcome = Failure{exit_status::kLaunchFailed, std::move(text), {}};
    (*outcome)->final = true;
  }
  return exit_status::kLaunchFailed;
}

}  // namespace hvdrun::launcher
