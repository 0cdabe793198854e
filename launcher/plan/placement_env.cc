// The policy in the ranks' environment, each rank's placement from it, and the launcher's
// check and report of this machine's ranks.
#include "launcher/plan/placement_env.h"

#include <algorithm>

#include "common/env_names.h"
#include "common/error.h"
#include "common/whole_number.h"

namespace hvdrun::launcher {
namespace {

// The value of NAME in a NAME=VALUE list (the last one wins, as in an environment).
std::optional<std::string> value_of(const std::vector<std::string>& env, const char* name) {
  const std::string prefix = std::string(name) + "=";
  std::optional<std::string> out;
  for (const auto& e : env) {
    if (e.rfind(prefix, 0) == 0) out = e.substr(prefix.size());
  }
  return out;
}

int number_of(const std::vector<std::string>& env, const char* name, int fallback) {
  const auto text = value_of(env, name);
  if (!text) return fallback;
  const auto n = parse_whole_number(*text, 0, 1 << 20);
  if (!n) throw UsageError(std::string(name) + "=" + *text + " is not a whole number");
  return static_cast<int>(*n);
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string numbers_text(const std::vector<int>& v) {
  std::string out;
  for (int n : v) out += (out.empty() ? "" : ",") + std::to_string(n);
  return or_dash(out);
}

}  // namespace

std::vector<std::string> placement_env(const PlacementPolicy& policy) {
  if (policy.bind_to == BindTo::none) return {};
  return {std::string(kBindToVar) + "=" + std::string(to_string(policy.bind_to)),
          std::string(kMapByVar) + "=" + std::string(to_string(policy.map_by)),
          std::string(kCpusPerRankVar) + "=" + std::to_string(policy.cpus_per_rank)};
}

std::optional<PlacementPolicy> policy_from_env(const std::vector<std::string>& env) {
  const auto bind = value_of(env, kBindToVar);
  if (!bind) return std::nullopt;
  PlacementPolicy p;
  const auto b = parse_bind_to(*bind);
  if (!b) throw UsageError(std::string(kBindToVar) + "=" + *bind + " is not a --bind-to word");
  p.bind_to = *b;
  if (p.bind_to == BindTo::none) return std::nullopt;
  const std::string map = value_of(env, kMapByVar).value_or("slot");
  const auto m = parse_map_by(map);
  if (!m) throw UsageError(std::string(kMapByVar) + "=" + map + " is not a --map-by word");
  p.map_by = *m;
  p.cpus_per_rank = number_of(env, kCpusPerRankVar, 1);
  return p;
}

std::optional<RankPlacement> rank_placement(const HostTopology& topology, const std::string& host,
                                            const std::vector<std::string>& env) {
  const auto policy = policy_from_env(env);
  if (!policy) return std::nullopt;
  const int local_size = number_of(env, env_names::kLocalSize, 1);
  const int local_rank = number_of(env, env_names::kLocalRank, 0);
  if (local_rank >= local_size) {
    throw UsageError("local rank " + std::to_string(local_rank) + " of " +
                     std::to_string(local_size) + " cannot be placed");
  }
  std::vector<int> ranks(static_cast<std::size_t>(local_size));
  for (int i = 0; i < local_size; ++i) ranks[static_cast<std::size_t>(i)] = i;
  return plan_placement(topology, host, ranks, *policy)[static_cast<std::size_t>(local_rank)];
}

LaunchOptions with_placement(const LaunchPlan& plan, const LaunchOptions& options,
                             std::string& report, const std::function<HostTopology()>& topology) {
  LaunchOptions out = options;
  const PlacementPolicy& policy = options.placement;
  if (policy.bind_to == BindTo::none && !options.report_bindings) return out;
  const auto locals = std::count_if(plan.hosts.begin(), plan.hosts.end(),
                                    [](const PlannedHost& h) { return h.local; });
  if (policy.bind_to != BindTo::none && locals > 1) {
    throw UsageError("--bind-to needs this machine once in the host list; it is there " +
                     std::to_string(locals) + " times (give it one entry with all its slots)");
  }
  std::optional<HostTopology> here;
  for (const auto& h : plan.hosts) {
    if (!h.local) {
      report += "host " + h.name + ": placed by its agent when its ranks start\n";
      continue;
    }
    if (!here) here = topology();
    const auto placed = plan_placement(*here, h.name, h.ranks, policy);
    report += render_bindings(h.name, placed);
  }
  const auto vars = placement_env(policy);
  out.env.insert(out.env.end(), vars.begin(), vars.end());
  return out;
}

std::string render_bindings(const std::string& host, const std::vector<RankPlacement>& ranks) {
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "HOST", "LOCAL", "CORES", "CPUS", "NUMA", "GPU", "NIC"}};
  for (const auto& r : ranks) {
    const bool bound = !r.cpus.empty();
    rows.push_back({std::to_string(r.rank), host, std::to_string(r.local_rank),
                    bound ? cpu_list_text(r.cores) : "unbound", bound ? cpu_list_text(r.cpus) : "-",
                    numbers_text(r.numa), numbers_text(r.gpus), or_dash(r.nic)});
  }
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c + 1 < row.size(); ++c) {
      out += row[c] + std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += row.back() + "\n";
  }
  return out;
}

}  // namespace hvdrun::launcher
