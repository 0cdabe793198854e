// make_plan: host source, placement and launch method, each decided here and nowhere else.
#include "launcher/launch_plan.h"

#include <algorithm>

#include "common/error.h"
#include "launcher/local_host.h"

namespace hvdrun::launcher {
namespace {

PlannedHost plan_host(const std::string& name, int slots) {
  PlannedHost h;
  h.name = name;
  h.slots = slots;
  h.local = is_local_host(name);
  h.method = h.local ? LaunchMethod::local : LaunchMethod::ssh;
  return h;
}

// The host source and its default: no -H/--hostfile means localhost with -np slots.
std::vector<hostfile::HostSlots> source_hosts(const LaunchOptions& options, HostSource& source,
                                              int default_slots) {
  if (!options.hosts.empty()) {
    source = HostSource::command_line;
    return options.hosts;
  }
  source = HostSource::localhost;
  return {{"localhost", default_slots}};
}

}  // namespace

std::string_view to_string(LaunchMethod method) {
  switch (method) {
    case LaunchMethod::local:
      return "local";
    case LaunchMethod::ssh:
      return "ssh";
  }
  return "?";
}

bool LaunchPlan::all_local() const {
  return std::all_of(hosts.begin(), hosts.end(), [](const PlannedHost& h) { return h.local; });
}

LaunchPlan make_plan(const LaunchOptions& options) {
  if (options.hosts.empty() && !options.np) {
    throw UsageError(
        "-np is required without -H or --hostfile; expected e.g. hvdrun -np 4 python train.py");
  }
  LaunchPlan plan;
  plan.placement =
      hostfile::place(source_hosts(options, plan.source, options.np.value_or(1)), options.np);
  for (const auto& h : plan.placement.hosts) plan.hosts.push_back(plan_host(h.name, h.slots));
  for (const auto& slot : plan.placement.ranks) {
    plan.hosts[static_cast<std::size_t>(slot.host_index)].ranks.push_back(slot.rank);
  }
  return plan;
}

LaunchPlan make_check_plan(const LaunchOptions& options) {
  LaunchPlan plan;
  for (const auto& h : source_hosts(options, plan.source, options.np.value_or(1))) {
    plan.hosts.push_back(plan_host(h.name, h.slots));
  }
  return plan;
}

}  // namespace hvdrun::launcher
