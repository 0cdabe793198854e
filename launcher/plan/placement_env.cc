// The policy in the ranks' environment, and the launcher's check and report of this
// machine's ranks (each set up as its agent will: rank_devices.h).
#include "launcher/plan/placement_env.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "common/env_names.h"
#include "common/error.h"
#include "common/whole_number.h"
#include "launcher/plan/rank_devices.h"

namespace hvdrun::launcher {
namespace {

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

std::string numbers_text(const std::vector<int>& v) {
  std::string out;
  for (int n : v) out += (out.empty() ? "" : ",") + std::to_string(n);
  return or_dash(out);
}

std::string gpus_text(const std::vector<int>& gpus, const std::vector<std::string>& ids) {
  if (ids.empty()) return numbers_text(gpus);
  std::vector<std::string> out;
  for (int g : gpus) {
    if (g >= 0 && static_cast<std::size_t>(g) < ids.size())
      out.push_back(ids[static_cast<std::size_t>(g)]);
  }
  return or_dash(comma_joined(out));
}

constexpr const char kOmp[] = "OMP_NUM_THREADS";

// Whether the user sets NAME for the ranks: in the launcher's environment or with -x.
bool user_sets(const LaunchOptions& options, const std::vector<std::string>& launcher_env,
               const char* name) {
  const std::string prefix = std::string(name) + "=";
  auto named = [&](const std::string& e) { return e.rfind(prefix, 0) == 0 || e == name; };
  return std::any_of(launcher_env.begin(), launcher_env.end(), named) ||
         std::any_of(options.env.begin(), options.env.end(), named);
}

// A host whose hostfile lists its GPUs is checked against them before the start.
void check_listed_gpus(const PlannedHost& h, const PlacementPolicy& policy) {
  const auto need = h.ranks.size() * static_cast<std::size_t>(policy.gpus_per_rank);
  if (h.gpus.empty() || need <= h.gpus.size()) return;
  throw UsageError("host " + h.name + ": " + std::to_string(h.ranks.size()) + " ranks x " +
                   std::to_string(policy.gpus_per_rank) + " GPUs per rank need " +
                   std::to_string(need) + " GPUs, and its gpus= lists " +
                   std::to_string(h.gpus.size()) + " (" + comma_joined(h.gpus) +
                   "); lower -np or --gpus-per-rank, or list more GPUs");
}

// Whether the user names the ranks' NIC: --network-interface, or one of its variables.
bool nic_given(const LaunchOptions& options, const std::vector<std::string>& launcher_env) {
  return !options.network_interface.empty() ||
         std::any_of(std::begin(kNicVars), std::end(kNicVars),
                     [&](const char* name) { return user_sets(options, launcher_env, name); });
}

}  // namespace

HostBindings host_bindings(const HostTopology& t, const PlannedHost& h, const LaunchOptions& placed,
                           const std::vector<std::string>& launcher_env,
                           const std::function<bool(const std::string&)>& present) {
  const PlacementPolicy& policy = placed.placement;
  std::vector<std::string> env = launcher_env;
  for (const auto& e : placed.env) {
    if (e.find('=') != std::string::npos) env.push_back(e);
  }
  if (!h.gpus.empty()) env.push_back(std::string(kHostGpusVar) + "=" + comma_joined(h.gpus));
  const auto n = h.ranks.size();
  env.push_back(std::string(env_names::kLocalSize) + "=" + std::to_string(n));
  env.emplace_back();
  HostBindings out;
  for (std::size_t i = 0; i < n; ++i) {
    env.back() = std::string(env_names::kLocalRank) + "=" + std::to_string(i);
    const auto setup = rank_setup(t, h.name, env, user_sets(placed, launcher_env, kOmp), present,
                                  nic_given(placed, launcher_env));
    if (!setup) return {plan_placement(t, h.name, h.ranks, policy), {}};
    out.ranks.push_back(setup->placed);
    out.ranks.back().rank = h.ranks[i];
    out.gpu_ids = setup->gpu_ids;
  }
  return out;
}

int env_number(const std::vector<std::string>& env, const char* name, int fallback) {
  const auto text = env_value(env, name);
  if (!text) return fallback;
  const auto n = parse_whole_number(*text, 0, 1 << 20);
  if (!n) throw UsageError(std::string(name) + "=" + *text + " is not a whole number");
  return static_cast<int>(*n);
}

std::string comma_joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> placement_env(const PlacementPolicy& policy) {
  std::vector<std::string> out;
  if (policy.bind_to != BindTo::none) {
    out = {std::string(kBindToVar) + "=" + std::string(to_string(policy.bind_to)),
           std::string(kMapByVar) + "=" + std::string(to_string(policy.map_by)),
           std::string(kCpusPerRankVar) + "=" +
               (policy.cpus_per_rank == kEqualShare ? std::string(kEqualShareWord)
                                                    : std::to_string(policy.cpus_per_rank))};
  }
  if (policy.gpus_per_rank > 0) {
    out.push_back(std::string(kGpusPerRankVar) + "=" + std::to_string(policy.gpus_per_rank));
  }
  return out;
}

std::optional<PlacementPolicy> policy_from_env(const std::vector<std::string>& env) {
  PlacementPolicy p;
  p.gpus_per_rank = env_number(env, kGpusPerRankVar, 0);
  if (const auto bind = env_value(env, kBindToVar)) {
    const auto b = parse_bind_to(*bind);
    if (!b) throw UsageError(std::string(kBindToVar) + "=" + *bind + " is not a --bind-to word");
    p.bind_to = *b;
  }
  if (p.bind_to == BindTo::none && p.gpus_per_rank == 0) return std::nullopt;
  if (p.bind_to == BindTo::none) return p;
  const std::string map = env_value(env, kMapByVar).value_or("slot");
  const auto m = parse_map_by(map);
  if (!m) throw UsageError(std::string(kMapByVar) + "=" + map + " is not a --map-by word");
  p.map_by = *m;
  p.cpus_per_rank = env_value(env, kCpusPerRankVar) == kEqualShareWord
                        ? kEqualShare
                        : env_number(env, kCpusPerRankVar, 1);
  return p;
}

std::vector<std::string> process_env() {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

std::string omp_note(const LaunchOptions& options, const std::vector<std::string>& launcher_env) {
  std::string out;
  if (options.placement.cpus_per_rank == kEqualShare && options.placement.bind_to != BindTo::none) {
    out =
        "hvdrun: inside Slurm with --cpus-per-task, each rank is bound to an equal share of "
        "its node's CPUs in the allocation, as srun binds its tasks (unbound on a node with "
        "fewer cores than ranks); --bind-to none turns this off\n";
  }
  if (options.placement.bind_to == BindTo::none || user_sets(options, launcher_env, kOmp)) {
    return out;
  }
  return out +
         "hvdrun: OMP_NUM_THREADS is set in each rank to its number of bound cores; give "
         "-x OMP_NUM_THREADS=N to choose another\n";
}

bool slurm_equal_share(const LaunchPlan& plan, const LaunchOptions& options,
                       const std::vector<std::string>& launcher_env) {
  if (options.bind_to_given || options.placement.gpus_per_rank > 0) return false;
  const bool srun = std::any_of(plan.hosts.begin(), plan.hosts.end(), [](const PlannedHost& h) {
    return h.method == LaunchMethod::slurm;
  });
  const auto per_task = env_value(launcher_env, kSlurmCpusPerTaskVar);
  return srun && per_task && parse_whole_number(*per_task, 1, 1 << 20).has_value();
}

LaunchOptions with_placement(const LaunchPlan& plan, const LaunchOptions& options,
                             std::string& report, const std::function<HostTopology()>& topology,
                             const std::vector<std::string>& launcher_env) {
  LaunchOptions out = options;
  if (slurm_equal_share(plan, options, launcher_env))
    out.placement = {BindTo::core, MapBy::slot, kEqualShare, 0};
  const PlacementPolicy& policy = out.placement;
  const bool listed = std::any_of(plan.hosts.begin(), plan.hosts.end(),
                                  [](const PlannedHost& h) { return !h.gpus.empty(); });
  if (policy.bind_to == BindTo::none && policy.gpus_per_rank == 0 && !listed &&
      options.network_interfaces.empty() && !options.report_bindings) {
    return out;
  }
  const auto locals = std::count_if(plan.hosts.begin(), plan.hosts.end(),
                                    [](const PlannedHost& h) { return h.local; });
  if (policy.bind_to != BindTo::none && locals > 1) {
    throw UsageError("--bind-to needs this machine once in the host list; it is there " +
                     std::to_string(locals) + " times (give it one entry with all its slots)");
  }
  auto vars = placement_env(policy);
  if (options.bind_to_given && policy.bind_to == BindTo::none && policy.gpus_per_rank > 0) {
    vars.push_back(std::string(kBindToVar) + "=none");  // no default binding near the GPUs
  }
  if (!options.network_interfaces.empty()) {
    vars.push_back(std::string(kNetworkInterfacesVar) + "=" +
                   comma_joined(options.network_interfaces));
  }
  out.env.insert(out.env.end(), vars.begin(), vars.end());
  std::optional<HostTopology> here;
  for (const auto& h : plan.hosts) {
    check_listed_gpus(h, policy);
    if (!h.local) continue;  // reported from its agent's topology when it is ready
    if (!here) here = topology();
    // Each rank set up as its agent will set it up.
    const HostBindings b = host_bindings(*here, h, out, launcher_env, interface_present);
    report += render_bindings(h.name, b.ranks, b.gpu_ids);
  }
  return out;
}

bool wants_topology(const LaunchOptions& options) {
  return options.placement.bind_to != BindTo::none || options.placement.gpus_per_rank > 0 ||
         !options.network_interfaces.empty() || options.report_bindings;
}

HostBindings remote_bindings(const HostTopology& topology, const PlannedHost& h,
                             const LaunchOptions& placed) {
  // Its interfaces as its agent listed them (all of them, when it listed none).
  const auto present = [&](const std::string& name) {
    const auto& names = topology.interfaces;
    return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
  };
  return host_bindings(topology, h, placed, {}, present);
}

std::string host_report(const HostTopology& topology, const PlannedHost& h,
                        const LaunchOptions& placed) {
  const HostBindings b = remote_bindings(topology, h, placed);
  return render_bindings(h.name, b.ranks, b.gpu_ids);
}

std::string render_bindings(const std::string& host, const std::vector<RankPlacement>& ranks,
                            const std::vector<std::string>& gpu_ids) {
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "HOST", "LOCAL", "CORES", "CPUS", "NUMA", "GPU", "NIC"}};
  for (const auto& r : ranks) {
    const bool bound = !r.cpus.empty();
    rows.push_back({std::to_string(r.rank), host, std::to_string(r.local_rank),
                    bound ? cpu_list_text(r.cores) : "unbound", bound ? cpu_list_text(r.cpus) : "-",
                    numbers_text(r.numa), gpus_text(r.gpus, gpu_ids), or_dash(r.nic)});
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
