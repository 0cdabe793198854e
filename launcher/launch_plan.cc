// make_plan: host source, placement and launch method, each decided here and nowhere else.
#include "launcher/launch_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "launcher/local_host.h"

namespace hvdrun::launcher {
namespace {

PlannedHost plan_host(const std::string& name, int slots, const LauncherChoice& launcher) {
  PlannedHost h;
  h.name = name;
  h.slots = slots;
  switch (launcher.kind) {
    case LauncherChoice::slurm:
      // srun reaches every node of the step, the one this runs on included.
      h.local = false;
      h.method = LaunchMethod::slurm;
      break;
    case LauncherChoice::exec:
      h.local = false;
      h.method = LaunchMethod::exec;
      break;
    default:
      h.local = is_local_host(name);
      h.method = h.local ? LaunchMethod::local : LaunchMethod::ssh;
      break;
  }
  return h;
}

// The host source in priority order: -H/--hostfile, a scheduler's allocation, localhost
// with `default_slots`.
std::vector<hostfile::HostSlots> source_hosts(const LaunchOptions& options, LaunchPlan& plan,
                                              const PlanEnvironment& env, int default_slots) {
  if (!options.hosts.empty()) {
    plan.source = HostSource::command_line;
    return options.hosts;
  }
  if (auto allocation = hostfile::detect_allocation(env.getenv)) {
    plan.source = HostSource::scheduler;
    plan.allocation = std::move(*allocation);
    return plan.allocation.hosts;
  }
  plan.source = HostSource::localhost;
  return {{"localhost", default_slots}};
}

bool in_slurm_allocation(const LaunchPlan& plan) {
  return plan.source == HostSource::scheduler && plan.allocation.scheduler == "slurm";
}

// --launcher auto resolved; slurm checked against where the hosts came from.
LauncherChoice resolve_launcher(const LaunchOptions& options, const LaunchPlan& plan,
                                const PlanEnvironment& env) {
  LauncherChoice c = options.launcher;
  if (c.kind == LauncherChoice::automatic) {
    c.kind = in_slurm_allocation(plan) && env.on_path("srun") ? LauncherChoice::slurm
                                                              : LauncherChoice::ssh;
  }
  if (c.kind == LauncherChoice::slurm && env.getenv("SLURM_JOB_ID") == nullptr) {
    throw UsageError(
        "--launcher slurm needs a Slurm allocation (SLURM_JOB_ID is not set); run hvdrun "
        "inside salloc or sbatch, or choose --launcher ssh");
  }
  return c;
}

}  // namespace

std::string_view to_string(LaunchMethod method) {
  switch (method) {
    case LaunchMethod::local:
      return "local";
    case LaunchMethod::ssh:
      return "ssh";
    case LaunchMethod::slurm:
      return "slurm";
    case LaunchMethod::exec:
      return "exec";
  }
  return "?";
}

bool LaunchPlan::all_local() const {
  return std::all_of(hosts.begin(), hosts.end(), [](const PlannedHost& h) { return h.local; });
}

PlanEnvironment PlanEnvironment::process() {
  PlanEnvironment env;
  env.getenv = [](const char* name) -> const char* { return std::getenv(name); };
  env.on_path = [](const std::string& program) {
    return find_in_path(program, std::getenv("PATH"));
  };
  return env;
}

bool find_in_path(const std::string& program, const char* path) {
  if (path == nullptr) return false;
  std::string_view rest(path);
  while (true) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string file = dir + "/" + program;
    if (::access(file.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

LaunchPlan make_plan(const LaunchOptions& options, const PlanEnvironment& env) {
  LaunchPlan plan;
  auto hosts = source_hosts(options, plan, env, options.np.value_or(1));
  if (plan.source == HostSource::localhost && !options.np) {
    std::string program = options.command.empty() ? "python" : options.command.front();
    if (program.size() > 60 || program.find_first_of(" \t\r\n") != std::string::npos) {
      program = "command";
    }
    throw UsageError(
        "-np is required without -H, --hostfile or a scheduler allocation; expected e.g. "
        "hvdrun -np 4 " +
        program);
  }
  plan.launcher = resolve_launcher(options, plan, env);
  plan.placement = hostfile::place(hosts, options.np);
  for (const auto& h : plan.placement.hosts) {
    plan.hosts.push_back(plan_host(h.name, h.slots, plan.launcher));
  }
  for (const auto& slot : plan.placement.ranks) {
    plan.hosts[static_cast<std::size_t>(slot.host_index)].ranks.push_back(slot.rank);
  }
  return plan;
}

LaunchPlan make_check_plan(const LaunchOptions& options, const PlanEnvironment& env) {
  LaunchPlan plan;
  auto hosts = source_hosts(options, plan, env, options.np.value_or(1));
  plan.launcher = resolve_launcher(options, plan, env);
  for (const auto& h : hosts) plan.hosts.push_back(plan_host(h.name, h.slots, plan.launcher));
  return plan;
}

}  // namespace hvdrun::launcher
