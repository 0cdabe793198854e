// The topology probe: its text form, and reading every host of a plan with it.
#include "launcher/hosts/host_topologies.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <stdexcept>

#include "common/error.h"
#include "common/version.h"
#include "launcher/plan/placement_env.h"
#include "launcher/plan/rank_devices.h"
#include "launcher/plan/start_window.h"
#include "launcher/topology/topology_wire.h"
#include "ssh/config.h"

namespace hvdrun::launcher {
namespace {

// The next line of `text` (without its newline), which must start with `word` and a space;
// `text` moves past it.
std::string take_line(std::string_view& text, std::string_view word) {
  const auto end = text.find('\n');
  if (end == std::string_view::npos)
    throw std::runtime_error("the topology probe's output ends before its '" + std::string(word) +
                             "' line");
  const std::string_view line = text.substr(0, end);
  text.remove_prefix(end + 1);
  if (line.size() <= word.size() || line.substr(0, word.size()) != word ||
      line[word.size()] != ' ') {
    throw std::runtime_error("the topology probe's output has '" + std::string(line) +
                             "' where its '" + std::string(word) + "' line belongs");
  }
  return std::string(line.substr(word.size() + 1));
}

ProbedHost read_here(const std::vector<std::string>& env) {
  ProbedHost out;
  try {
    out.topology = load_host_topology();
  } catch (const std::exception& e) {
    out.why_not = std::string("hwloc could not read this machine: ") + e.what();
    out.gpu_ids = host_gpu_ids(HostTopology{}, env, &out.gpus_from);
    return out;
  }
  out.gpu_ids = host_gpu_ids(*out.topology, env, &out.gpus_from);
  return out;
}

}  // namespace

std::string topology_probe_text() {
  const ProbedHost here = read_here(process_env());
  if (!here.topology) throw std::runtime_error(here.why_not);
  const std::string ids = comma_joined(here.gpu_ids);
  return "gpus " + (ids.empty() ? std::string("-") : ids) + "\nfrom " + here.gpus_from + "\n" +
         topology_to_wire(*here.topology);
}

ProbedHost parse_topology_probe(std::string_view text) {
  ProbedHost out;
  const std::string ids = take_line(text, "gpus");
  if (ids != "-") out.gpu_ids = comma_list(ids);
  out.gpus_from = take_line(text, "from");
  out.topology = topology_from_wire(text);
  return out;
}

ProbedHost probe_this_machine() { return read_here(process_env()); }

ProbedHosts probe_hosts(const LaunchPlan& plan, const LaunchOptions& options,
                        ssh::Connector& connector) {
  PreflightSettings settings;
  settings.expected_version = kVersionLine;
  settings.max_parallel = static_cast<int>(launch_concurrency(std::getenv(kLaunchConcurrencyVar)));
  settings.read_topology = true;
  ProbedHosts out;
  out.report =
      preflight(plan, options, ssh::SshConfig::load_for(options.ssh_config), connector, settings);
  std::optional<ProbedHost> here;
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    const PlannedHost& h = plan.hosts[i];
    const HostCheck& check = out.report.hosts[i];
    ProbedHost p;
    if (h.method == LaunchMethod::local) {
      if (!here) here = probe_this_machine();
      p = *here;
    } else if (h.method != LaunchMethod::ssh) {
      p.why_not = check.detail + "; its topology is read when the job starts";
    } else if (check.verdict != Verdict::ok) {
      p.why_not = std::string(to_string(check.verdict)) + ": " + check.detail;
    } else {
      try {
        p = parse_topology_probe(check.topology);
      } catch (const std::exception& e) {
        p.why_not = std::string("its topology cannot be read: ") + e.what();
      }
    }
    out.hosts.push_back(std::move(p));
  }
  return out;
}

LaunchOptions with_counted_slots(const LaunchOptions& options, ssh::Connector& connector) {
  LaunchOptions out = options;
  if (out.np_auto && out.hosts.empty()) {
    // Without hosts, this machine; an allocation's hosts are not read before the start.
    const LaunchPlan found = make_check_plan(out);
    if (found.source != HostSource::localhost)
      throw UsageError(
          "-np auto counts the GPUs of hosts given with -H or --hostfile, or of this machine; "
          "the hosts of " +
          found.allocation.scheduler + "'s allocation are not read before the start: give -np N");
    out.hosts.push_back({"localhost", 1});
  }
  if (out.np_auto) {
    for (auto& h : out.hosts) {
      if (!h.auto_slots && h.slots > 1)
        throw UsageError("-np auto gives each host one rank per GPU, and host " + h.name +
                         " is given " + std::to_string(h.slots) + " slots; write " + h.name +
                         ":auto, or drop -np auto and give -np N");
      h.auto_slots = true;
    }
  }
  const auto counted = [](const hostfile::HostSlots& h) { return h.auto_slots; };
  if (std::none_of(out.hosts.begin(), out.hosts.end(), counted)) return out;
  if (out.elastic.enabled())
    throw UsageError(
        "host:auto and -np auto count each host's GPUs once, before the start; elastic mode "
        "takes its hosts from -H or the discovery script with numbers of slots");
  LaunchOptions probe = out;  // the counted hosts alone, as a check would plan them
  probe.hosts.clear();
  probe.include.clear();
  probe.exclude.clear();
  probe.np.reset();
  std::copy_if(out.hosts.begin(), out.hosts.end(), std::back_inserter(probe.hosts), counted);
  const LaunchPlan plan = make_check_plan(probe);
  const ProbedHosts probed = probe_hosts(plan, probe, connector);
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    const std::string& name = plan.hosts[i].name;
    const ProbedHost& p = probed.hosts[i];
    const HostCheck& check = probed.report.hosts[i];
    if (plan.hosts[i].method == LaunchMethod::ssh && check.verdict != Verdict::ok)
      throw LaunchError("host " + name + ": its GPUs could not be counted for " + name +
                        ":auto: " + std::string(to_string(check.verdict)) + ": " + check.detail +
                        (check.fix.empty() ? "" : "; " + check.fix));
    if (plan.hosts[i].method != LaunchMethod::ssh && plan.hosts[i].method != LaunchMethod::local)
      throw UsageError("host " + name + ": " + name +
                       ":auto counts its GPUs before the start, "
                       "and it is " +
                       check.detail + "; give its number of slots");
    if (p.gpu_ids.empty())
      throw UsageError("host " + name + ": " + name + ":auto found no GPU there (looked in " +
                       p.gpus_from + (p.why_not.empty() ? "" : "; " + p.why_not) +
                       "); give its number of slots");
    for (auto& h : out.hosts) {
      if (h.name != name || !h.auto_slots) continue;
      h.slots = static_cast<int>(p.gpu_ids.size());
      h.auto_slots = false;
    }
  }
  return out;
}

}  // namespace hvdrun::launcher
